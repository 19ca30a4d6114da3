"""Proving that every access of a definition is in bounds.

Shared by ``infer-ranges`` (which reports the first unprovable access to the
user), the verifier (``--verify-each`` catches a pass that builds an
out-of-bounds read) and ``cse`` (which may only share subexpressions whose
reads are safe everywhere).  Each access is checked under the facts of its
position: index ranges, enclosing sum ranges and constraints, ``where`` guards.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from .diagnostics import TccError
from .expr import RANGED, Access, CSum, Expr, Sum, Where
from .index import Affine, Compare, Lookup, format_affine, lookups, negate
from .index_range import cond_affines
from .polyhedra import Facts, definition_facts, constant_range, expression_range
from .program import Definition, Program


@dataclass
class Use:
    """One occurrence of an access, with what is known where it occurs."""

    access: Access
    scopes: tuple  # enclosing Sum / CSum nodes, outermost first
    conds: tuple  # (cond, taken) for enclosing where branches
    lookup: Lookup | None = None  # set when the access is a read of an index array inside an index


def _lookup_uses(affines: Iterable[Affine], scopes: tuple, conds: tuple) -> Iterator[Use]:
    """The reads of index arrays inside these index expressions, as accesses to prove in bounds."""
    for a in affines:
        for lk in lookups(a):
            yield Use(Access(lk.tensor, lk.indices), scopes, conds, lk)


def uses(body: Expr) -> Iterator[Use]:
    """Every access occurrence (a tree walk: positions matter for facts).

    An explicit stack, in the order of a recursive left-to-right walk: a flat
    sum of many terms is a tree as deep as it is long.
    """
    seen: set = set()
    stack: list[tuple[Expr, tuple, tuple]] = [(body, (), ())]
    while stack:
        e, scopes, conds = stack.pop()
        key = (id(e), scopes, conds)
        if key in seen:
            continue
        seen.add(key)
        if isinstance(e, Access):
            yield Use(e, scopes, conds)
            yield from _lookup_uses(e.indices, scopes, conds)
        elif isinstance(e, Where):
            yield from _lookup_uses(cond_affines(e.cond), scopes, conds)
            stack.append((e.other, scopes, conds + ((e.cond, False),)))
            stack.append((e.then, scopes, conds + ((e.cond, True),)))
        elif isinstance(e, (*RANGED, CSum)):
            yield from _lookup_uses(e.lo + e.hi if isinstance(e, RANGED) else (), scopes, conds)
            stack.append((e.children()[0], scopes + (e,), conds))
        else:
            stack.extend((c, scopes, conds) for c in reversed(e.children()))


def facts_at(base: Facts, use: Use) -> Facts:
    """Facts at a use: enclosing sum ranges and where guards added to ``base``."""
    facts = base
    for s in use.scopes:
        if isinstance(s, RANGED):
            if s.has_range:
                facts = facts.with_range(s.var, s.lo, s.hi)
        else:
            for c in s.constraints:
                facts = facts.with_cond(c)
    for cond, taken in use.conds:
        facts = facts.with_cond(cond if taken else negate(cond))
    return facts


def access_in_bounds(program: Program, use: Use, facts: Facts) -> int | None:
    """The first dimension not proved in bounds, or None if all are."""
    extents = program.extents_of(use.access.tensor)
    if extents is None:
        return None
    for dim, (ix, ext) in enumerate(zip(use.access.indices, extents)):
        if facts.implies(Compare(">=", ix, Affine.constant(0))) and facts.implies(Compare("<=", ix, ext - 1)):
            continue
        return dim
    return None


def prove_in_bounds(program: Program, d: Definition, sizes: Sequence[str]) -> None:
    """Raise a located TccError for the first access of ``d`` not proved in bounds."""
    assert d.extents is not None
    base = definition_facts(sizes, d.indices, d.extents, program.assumptions)
    for use in uses(d.body):
        if program.extents_of(use.access.tensor) is None:
            continue
        facts = facts_at(base, use)
        dim = access_in_bounds(program, use, facts)
        if dim is not None:
            ext = program.extents_of(use.access.tensor)[dim]
            raise out_of_bounds_error(program, d, use, dim, use.access.indices[dim], ext, facts, sizes)


def out_of_bounds_error(program, d, use, dim, ix, ext, facts, sizes) -> TccError:  # noqa: ANN001
    """The error for an access not proved in bounds, with the range its index takes.

    The range printed must explain the refusal: a constant range is the one
    really reached (the integer minimum and maximum, not Fourier–Motzkin's
    real bounds, which ``//`` and ``%`` make unreachable), said as "may range
    over" where left-out conditions (``or``, ``!=``) make it a superset; a
    range that would lie inside the extent is not printed at all.
    """
    acc = use.access
    rng = expression_range(facts, ix, list(sizes))
    where = f"dimension {dim + 1} of '{acc.tensor}'" if len(acc.indices) > 1 else f"'{acc.tensor}'"
    span_verb = "ranges over"
    symbolic = rng is not None and rng[0] and rng[1] and not all(a.is_constant for a in rng[0] + rng[1])
    if not symbolic:
        exact = constant_range(facts, ix)
        if exact is not None:
            rng = ([Affine.constant(exact[0])], [Affine.constant(exact[1])])
        elif rng is not None and rng[0] and rng[1]:
            span_verb = "may range over"  # the real bounds, not shown to be reached
    if rng is not None and rng[0] and rng[1]:
        if not facts.exact:
            span_verb = "may range over"
        if _inside(facts, rng, ext):
            rng = None
    if rng is not None and rng[0] and rng[1]:
        lo = _bound_text(rng[0], "max")
        hi = _bound_text(rng[1], "min")
        span = f"{format_affine(ix)} {span_verb} {lo}..{hi}"
        concrete = all(a.is_constant for a in rng[0] + rng[1]) and ext.is_constant and span_verb == "ranges over"
        verb = "is out of bounds" if concrete else "may be out of bounds"
        msg = f"access {acc} {verb}: {span}, but {where} has extent {format_affine(ext)}{_assume_hint(rng, ext, sizes)}"
    else:
        msg = f"cannot prove that access {acc} is in bounds: {where} has extent {format_affine(ext)}"
    loc = program.loc_of(use.lookup if use.lookup is not None else acc)
    if use.scopes and program.source is not None:  # of identical accesses, the one in this occurrence's sum
        loc = program.source.loc_within(use.lookup or acc, use.scopes[-1]) or loc
    return TccError(msg, loc or d.loc, program.source)


def _inside(facts: Facts, rng: tuple, ext: Affine) -> bool:
    """Whether one lower bound is proved >= 0 and one upper bound proved < ``ext``:
    such a range would contradict the refusal it is meant to explain."""
    lo_ok = any(facts.implies(Compare(">=", a, Affine.constant(0))) for a in rng[0])
    hi_ok = any(facts.implies(Compare("<=", a, ext - 1)) for a in rng[1])
    return lo_ok and hi_ok


def _assume_hint(rng: tuple, ext: Affine, sizes: Sequence[str]) -> str:
    """``; if n >= 1 always holds, say so with 'assume n >= 1'`` where one constraint on sizes would do."""
    (lo,), (hi,) = (rng[0][:1], rng[1][:1]) if len(rng[0]) == 1 and len(rng[1]) == 1 else ((None,), (None,))
    if hi is None or ext.is_constant or not set(hi.names()) | set(ext.names()) <= set(sizes):
        return ""
    if not lo.is_constant or lo.const < 0 or (ext - hi - 1).is_constant:  # n >= n + 1 is no promise to make
        return ""
    need = f"{format_affine(ext)} >= {format_affine(hi + 1)}"
    return f"; if {need} always holds, say so with 'assume {need}'"


def _bound_text(items: Sequence[Affine], fn: str) -> str:
    items = list(dict.fromkeys(items))
    if len(items) == 1:
        return format_affine(items[0])
    return f"{fn}({', '.join(format_affine(a) for a in items)})"
