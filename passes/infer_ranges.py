"""``infer-ranges``: make every extent and sum range explicit, prove every access in bounds.

Inference follows Tensor Comprehensions: an index's range is the largest one
that keeps every access using it in bounds.  It proceeds in rounds; in each
round an unknown index gets its range from the accesses in which every *other*
index is already known (so in ``y[i] = sum[k](x[i + k] * w[k])`` the round-one
``w[k]`` fixes ``k``, then ``x[i + k]`` fixes ``i`` as the "valid" correlation
range).  A left-hand index always starts at 0, so only its upper bound is
inferred.  Ranges are affine in the size names; where two candidate bounds
cannot be ordered for all sizes the user must say which one is meant.

After inference every access is proved in bounds with Fourier–Motzkin under
the facts of its position (index ranges, enclosing sums, ``where`` guards), or
reported with the range its index actually covers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tcc.diagnostics import TccError
from tcc.ir.expr import CSum, Expr, Sum
from tcc.ir.index import Affine, format_affine
from tcc.ir.bounds import prove_in_bounds, uses
from tcc.ir.polyhedra import Facts, expression_range, program_facts
from tcc.ir.program import Definition, Program
from tcc.ir.verifier import verify
from tcc.pass_base import Level, Pass, PassContext


@dataclass(frozen=True)
class InferRanges(Pass):
    name = "infer-ranges"
    level = Level.INDEX
    summary = "infer extents and sum ranges from accesses; prove every access in bounds"

    def run(self, program: Program, ctx: PassContext) -> Program:
        verify(program, bounds=False)
        sizes = program.sizes()
        defs: list[Definition] = []
        current = program
        for d in program.definitions:
            new = _infer_definition(current, d, sizes)
            prove_in_bounds(current, new, sizes)
            defs.append(new)
            current = current.with_definitions(defs + list(program.definitions[len(defs):]))
        # Without output declarations every definition is a result; say so, so that
        # the printed program (which now fixes all extents) keeps that meaning.
        if not current.outputs:
            current = current.replace(outputs=current.results())
        return current


# ---------------------------------------------------------------------------


def _infer_definition(program: Program, d: Definition, sizes: Sequence[str]) -> Definition:
    unknown_sums = [u for u in _unranged_sums(d.body)]
    if d.extents is not None and not unknown_sums:
        return d
    base = program_facts(sizes)
    # known ranges: name/sum-node -> (lo, hi) lists of affine expressions in sizes
    lhs_known: dict[str, tuple[tuple[Affine, ...], tuple[Affine, ...]]] = {}
    if d.extents is not None:
        for i, e in zip(d.indices, d.extents):
            lhs_known[i] = ((Affine.constant(0),), (e - 1,))
    sum_known: dict[int, tuple[tuple[Affine, ...], tuple[Affine, ...]]] = {}
    for s in _ranged_sums(d.body):
        sum_known[id(s)] = (s.lo, s.hi)
    pending_lhs = [i for i in d.indices if i not in lhs_known]
    pending_sums = {id(s): s for s in unknown_sums}
    all_uses = list(uses(d.body))

    def resolve(name: str, scopes: tuple) -> object:
        for s in reversed(scopes):
            if isinstance(s, Sum) and s.var == name:
                return id(s)
            if isinstance(s, CSum) and name in s.vars:
                return ("csum", id(s), name)
        if name in d.indices:
            return name
        return None  # size

    def known_range(key: object):  # noqa: ANN202
        if isinstance(key, str):
            return lhs_known.get(key)
        if isinstance(key, int):
            return sum_known.get(key)
        return None

    while pending_lhs or pending_sums:
        progress: dict[object, tuple[list[Affine], list[Affine], list[str]]] = {}
        for use in all_uses:
            extents = program.extents_of(use.access.tensor)
            if extents is None:
                continue
            for dim, (ix, ext) in enumerate(zip(use.access.indices, extents)):
                keys = {}
                ok = True
                for atom, _c in ix.terms:
                    if not isinstance(atom, str):
                        ok = False
                        break
                    keys[atom] = resolve(atom, use.scopes)
                if not ok:
                    continue
                unknown = [n for n, k in keys.items() if k is not None and known_range(k) is None]
                if len(unknown) != 1:
                    continue
                var = unknown[0]
                key = keys[var]
                if isinstance(key, tuple):
                    continue  # CSum variables are bounded by their constraints
                coeff = ix.coeff(var)
                rest = ix - Affine.var(var, coeff)
                facts = base
                for n, k in keys.items():
                    if n != var and k is not None:
                        lo, hi = known_range(k)
                        facts = facts.with_range(n, lo, hi)
                rng = expression_range(facts, rest, list(sizes))
                if rng is None:
                    continue
                rlo, rhi = rng
                if not rlo or not rhi:
                    continue
                lows, highs, why = progress.setdefault(key, ([], [], []))
                # 0 <= coeff*var + rest <= ext - 1 for every value of rest
                rest_max = _tightest(rhi, base, upper=True)
                rest_min = _tightest(rlo, base, upper=False)
                if coeff > 0:
                    highs.append(_floor_div(ext - 1 - rest_max, coeff))
                    lows.append(_ceil_div(-rest_min, coeff))
                else:
                    highs.append(_floor_div(rest_min, -coeff))
                    lows.append(_ceil_div(rest_max - (ext - 1), -coeff))
                why.append(str(use.access))
        if not progress:
            break
        for key, (lows, highs, why) in progress.items():
            if isinstance(key, str):
                hi = _tightest(highs, base, upper=True, what=f"the extent of '{d.name}' along '{key}'", why=why, d=d, program=program)
                lhs_known[key] = ((Affine.constant(0),), (hi,))
                pending_lhs.remove(key)
            else:
                s = pending_sums.pop(key)
                lo = _tightest(lows, base, upper=False, what=f"the range of sum index '{s.var}'", why=why, d=d, program=program)
                hi = _tightest(highs, base, upper=True, what=f"the range of sum index '{s.var}'", why=why, d=d, program=program)
                sum_known[key] = ((lo,), (hi,))
    if pending_lhs:
        i = pending_lhs[0]
        raise TccError(
            f"cannot infer the extent of '{d.name}' along index '{i}': no access bounds it; declare it with 'output {d.name}[...]'",
            d.loc,
            program.source,
        )
    if pending_sums:
        s = next(iter(pending_sums.values()))
        raise TccError(
            f"cannot infer the range of sum index '{s.var}': no access bounds it; write sum[{s.var}: lo..hi]",
            program.loc_of(s) or d.loc,
            program.source,
        )

    # rebuild sums with their ranges (top-down because bodies change identity)
    memo: dict[int, Expr] = {}

    def rebuild(e: Expr) -> Expr:
        hit = memo.get(id(e))
        if hit is not None:
            return hit
        if isinstance(e, Sum):
            lo, hi = (e.lo, e.hi) if e.has_range else sum_known[id(e)]
            out: Expr = Sum(e.var, tuple(lo), tuple(hi), rebuild(e.body))
        else:
            from tcc.ir.expr import rebuild as rebuild_node

            kids = e.children()
            new = tuple(rebuild(k) for k in kids)
            out = rebuild_node(e, new) if new != kids else e
        memo[id(e)] = out
        return out

    body = rebuild(d.body)
    extents = d.extents
    if extents is None:
        extents = tuple(lhs_known[i][1][0] + 1 for i in d.indices)
    return Definition(d.name, d.indices, body, extents, d.loc)


def _tightest(
    cands: list[Affine],
    facts: Facts,
    upper: bool,
    what: str = "",
    why: Sequence[str] = (),
    d: Definition | None = None,
    program: Program | None = None,
) -> Affine:
    """The smallest upper bound (``upper``) or the largest lower bound among ``cands``."""
    uniq = list(dict.fromkeys(cands))
    if len(uniq) == 1:
        return uniq[0]
    for c in uniq:
        if upper:
            ok = all(facts.entails_ge(o, c) for o in uniq if o is not c)
        else:
            ok = all(facts.entails_ge(c, o) for o in uniq if o is not c)
        if ok:
            return c
    if d is None or program is None:
        raise TccError(
            "cannot order the bounds " + ", ".join(format_affine(c) for c in uniq) + " for all sizes"
        )
    raise TccError(
        f"cannot infer {what}: the bounds {', '.join(format_affine(c) for c in uniq)} "
        f"(from {', '.join(dict.fromkeys(why))}) cannot be ordered for all sizes; declare the extent explicitly",
        d.loc,
        program.source,
    )


def _floor_div(a: Affine, c: int) -> Affine:
    return a if c == 1 else a.floordiv(c)


def _ceil_div(a: Affine, c: int) -> Affine:
    return a if c == 1 else (a + (c - 1)).floordiv(c)


def _unranged_sums(e: Expr) -> list[Sum]:
    from tcc.ir.expr import postorder

    return [n for n in postorder(e) if isinstance(n, Sum) and not n.has_range]


def _ranged_sums(e: Expr) -> list[Sum]:
    from tcc.ir.expr import postorder

    return [n for n in postorder(e) if isinstance(n, Sum) and n.has_range]


# ---------------------------------------------------------------------------
