"""The L2 analysis library: what loop-nest statements read and write, one
statement walker and the rewriters every L2 pass builds on.

``hoist``, ``fuse``, ``reuse-buffers``, ``split-reduction``, ``parallel``,
``peel``, ``interchange``, ``unroll-jam`` and ``reduce-in-place`` all ask the
same questions of a statement list -- which names does it read, which does it
change, which buffers does it load -- and all rewrite statement trees the same
way.  The answers lived in ``passes/hoist.py`` (and were partly written again
in ``fuse``), so passes imported another pass for analysis; they sit here, in
the IR layer, next to the nodes they inspect, so every pass imports downward.

The walker primitives :func:`children`, :func:`walk_stmts` and
:func:`stmt_exprs` are defined with the nodes in :mod:`tcc.ir.loops` (the
verifier and the LLVM backend walk kernels with them too) and re-exported here.

External kernels (``extern inv(A) -> B``) read their arguments and write
their result: the helpers see exactly that, and passes leave such kernels
alone.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

from .expr import Access, Expr, Where, postorder, transform
from .index import Affine, Compare, Cond, FloorDiv, Mod, Not, atom_names, lookups, negate
from .loops import (
    Accumulate,
    Extern,
    For,
    If,
    Let,
    Local,
    LoopProgram,
    Stmt,
    Store,
    children,
    stmt_exprs,
    walk_stmts,
)

if TYPE_CHECKING:
    from .polyhedra import Facts

__all__ = [
    "ReadsInBounds",
    "affine_names",
    "all_writes",
    "bound_inside",
    "buffer_accesses",
    "children",
    "declared_scalars",
    "expr_names",
    "fold_bounds",
    "loads",
    "map_exprs",
    "map_stmts",
    "names_read_anywhere",
    "negated",
    "outer_writes",
    "owns",
    "perfect_nest",
    "program_names",
    "read_names",
    "reduction_band",
    "rename_reads",
    "stmt_exprs",
    "stored_buffers",
    "stride_cost",
    "strides_with",
    "substitute_stmts",
    "walk_exprs",
    "walk_stmts",
]


# ---------------------------------------------------------------------------
# Walking
# ---------------------------------------------------------------------------


def walk_exprs(body: Sequence[Stmt]) -> Iterator[Expr]:
    """Every scalar expression of a statement list, nested statements included, in walk order."""
    for s in walk_stmts(tuple(body)):
        yield from stmt_exprs(s)


def loads(e: Expr) -> list[Access]:
    """The buffer loads of an expression (an ``Access`` with indices, or of a scalar buffer)."""
    return [n for n in postorder(e) if isinstance(n, Access)]


def declared_scalars(body: Sequence[Stmt]) -> list[str]:
    """The ``let``/``local`` names declared anywhere in ``body``, in walk order."""
    return [s.name for s in walk_stmts(tuple(body)) if isinstance(s, (Let, Local))]


# ---------------------------------------------------------------------------
# Reads
# ---------------------------------------------------------------------------

_EXPR_NAMES: "weakref.WeakKeyDictionary[Expr, frozenset[str]]" = weakref.WeakKeyDictionary()


def expr_names(e: Expr) -> frozenset[str]:
    """Every name an L2 scalar expression reads: buffers, scalars, index and size names."""
    hit = _EXPR_NAMES.get(e)
    if hit is None:
        out: set[str] = set()
        for n in postorder(e):
            if isinstance(n, Access):
                out.add(n.tensor)
                for ix in n.indices:
                    out.update(ix.names())
            elif isinstance(n, Where):
                out.update(n.cond.names())
        hit = frozenset(out)
        _EXPR_NAMES[e] = hit
    return hit


def affine_names(items: Iterable[Affine]) -> set[str]:
    return {n for a in items for n in a.names()}


def _own_reads(s: Stmt) -> set[str]:
    """Names a statement's own header or expressions read: its nested statements are not looked at."""
    if isinstance(s, For):
        return affine_names(s.lo + s.hi)
    if isinstance(s, If):
        return set(s.cond.names())
    if isinstance(s, Let):
        return set(expr_names(s.value))
    if isinstance(s, Local):
        return set(expr_names(s.init))
    if isinstance(s, (Store, Accumulate)):
        return affine_names(s.indices) | expr_names(s.value)
    if isinstance(s, Extern):
        return set(s.args)
    raise TypeError(s)  # pragma: no cover - closed set


def _own_write(s: Stmt) -> str | None:
    """The name a statement itself assigns (a declaration counts), if any; nested ones are not looked at."""
    if isinstance(s, (Let, Local)):
        return s.name
    if isinstance(s, Store):
        return s.buffer
    if isinstance(s, Accumulate):
        return s.target
    if isinstance(s, Extern):
        return s.out
    return None


def read_names(body: Sequence[Stmt]) -> set[str]:
    """Names a statement list reads and does not bind itself (loop variables,
    ``let``/``local`` names declared in it are bound from their statement on).

    Targets of stores and accumulates are writes, not reads; their indices
    are reads.
    """
    free: set[str] = set()
    bound: set[str] = set()
    for s in body:
        used = _own_reads(s)
        if isinstance(s, For):
            used |= read_names(s.body) - {s.var}
        elif isinstance(s, If):
            used |= read_names(s.then) | read_names(s.orelse)
        free |= used - bound
        if isinstance(s, (Let, Local)):
            bound.add(s.name)
    return free


def names_read_anywhere(body: Sequence[Stmt]) -> set[str]:
    """Every name any expression, index, bound or test in ``body`` mentions."""
    out: set[str] = set()
    for s in walk_stmts(tuple(body)):
        out |= _own_reads(s)
    return out


# ---------------------------------------------------------------------------
# Writes
# ---------------------------------------------------------------------------


def outer_writes(body: Sequence[Stmt]) -> set[str]:
    """Names a statement list changes that are visible after it: stored or
    accumulated buffers, accumulated locals declared outside it, and the
    ``let``/``local`` names it declares at its top level."""
    out: set[str] = set()
    for s in body:
        if isinstance(s, For):
            out |= outer_writes(s.body) - _declared_here(s.body)
        elif isinstance(s, If):
            out |= (outer_writes(s.then) - _declared_here(s.then)) | (outer_writes(s.orelse) - _declared_here(s.orelse))
        else:
            name = _own_write(s)
            if name is not None:
                out.add(name)
    return out


def _declared_here(body: Sequence[Stmt]) -> set[str]:
    return {s.name for s in body if isinstance(s, (Let, Local))}


def all_writes(body: Sequence[Stmt]) -> set[str]:
    """Every name a statement list assigns anywhere inside, declarations included."""
    return {name for s in walk_stmts(tuple(body)) if (name := _own_write(s)) is not None}


def bound_inside(body: Sequence[Stmt]) -> set[str]:
    """Loop variables and scalar names declared anywhere inside ``body``."""
    out: set[str] = set()
    for s in walk_stmts(tuple(body)):
        if isinstance(s, For):
            out.add(s.var)
        elif isinstance(s, (Let, Local)):
            out.add(s.name)
    return out


def stored_buffers(body: Sequence[Stmt], buffers: set[str]) -> set[str]:
    """Buffers written (stored or accumulated) anywhere in ``body``."""
    return {n for n in all_writes(body) if n in buffers}


def program_names(program: LoopProgram) -> set[str]:
    """Every name a loop program uses (for fresh names): sizes, buffers,
    kernels, loop variables, scalars and index names."""
    names = set(program.sizes) | {b.name for b in program.buffers} | {k.name for k in program.kernels}
    for k in program.kernels:
        names |= bound_inside(k.body) | read_names(k.body) | all_writes(k.body)
    return names


# ---------------------------------------------------------------------------
# Buffer accesses and strides (dependence tests of fuse, parallel, peel, the verifier)
# ---------------------------------------------------------------------------


def buffer_accesses(body: Sequence[Stmt], buffers: set[str]) -> list[tuple[str, tuple[Affine, ...], bool]]:
    """``(buffer, indices, is_write)`` for every load, store and accumulate."""
    out: list[tuple[str, tuple[Affine, ...], bool]] = []

    def expr(e: Expr) -> None:
        for a in loads(e):
            if a.tensor in buffers and (a.indices or a.tensor not in scalars):
                out.append((a.tensor, a.indices, False))

    scalars: set[str] = set()

    def visit(stmts: Sequence[Stmt]) -> None:
        for s in stmts:
            if isinstance(s, For):
                visit(s.body)
            elif isinstance(s, If):
                visit(s.then)
                visit(s.orelse)
            elif isinstance(s, (Let, Local)):
                expr(s.value if isinstance(s, Let) else s.init)
                scalars.add(s.name)
            elif isinstance(s, Store):
                expr(s.value)
                if s.indices or s.buffer not in scalars:  # `acc = max(acc, v)` sets a local, not a buffer
                    out.append((s.buffer, s.indices, True))
            elif isinstance(s, Accumulate):
                expr(s.value)
                if s.indices or s.target in buffers and s.target not in scalars:
                    out.append((s.target, s.indices, True))
                    out.append((s.target, s.indices, False))

    visit(body)
    return out


def strides_with(ix: Affine, var: str) -> bool:
    """``ix`` is ``c*var + rest`` with ``c != 0`` and ``var`` not inside ``//`` or ``%``.

    Such an index is one to one in ``var`` while ``rest`` is fixed: the basis
    of every race-freedom and fusion argument on L2.
    """
    if ix.coeff(var) == 0:
        return False
    return not any(not isinstance(a, str) and var in atom_names(a) for a in ix.atoms())


def owns(ix: Affine, var: str, outer: set[str]) -> bool:
    """``ix`` is ``c*var + r`` with ``c != 0``, ``var`` outside ``//``/``%``, and ``r``
    using only ``outer`` names: distinct values of ``var`` touch distinct
    elements once ``outer`` is fixed (``fuse`` and ``parallel``'s independence test)."""
    return strides_with(ix, var) and set(ix.names()) - {var} <= outer


def constant_trips(loop: For) -> int | None:
    """The trip count of a loop with one lower and one upper bound a constant apart, else None."""
    if len(loop.lo) != 1 or len(loop.hi) != 1:
        return None
    d = loop.hi[0] - loop.lo[0]
    return max(0, d.const + 1) if d.is_constant else None


def residue_separates(ix: Affine, var: str, trips: int | None, inner: set[str] | frozenset[str]) -> bool:
    """``ix`` is ``c*var + k_1*t_1 + ... + rest`` where the ``t_j`` are ``inner`` loop variables
    (outside ``//``/``%``), ``rest`` is free of them, and the ``k_j`` share a factor
    ``m >= |c| * trips`` (``trips``: ``var``'s constant trip count).

    Then distinct values of ``var`` touch distinct elements whatever the
    ``t_j`` are: two iterations meeting would need ``c*(v1 - v2) + (d1 - d2)``
    to be a multiple of ``m`` while its magnitude is below ``|c| * trips`` (the
    constants ``d`` of a strip span less than ``|c|``), so it is zero, and then
    ``v1 = v2``.  ``privatize`` deals rows ``P*t + p`` to the parts ``p`` of
    its part loop (``0 <= p < P``): this is the rule that lets them run at once.
    """
    if trips is None or not strides_with(ix, var):
        return False
    used = set(ix.names()) & set(inner)
    if not used:
        return False
    m = 0
    for t in used:
        if not strides_with(ix, t):
            return False
        m = math.gcd(m, abs(ix.coeff(t)))
    return m >= abs(ix.coeff(var)) * trips


def stride_cost(var: str, values: "list[Expr] | tuple[Expr, ...]", buffers: "set[str] | dict[str, int]") -> int:
    """The stride model of ``interchange`` and ``reduce-in-place``: each load in
    ``values`` charges ``var`` how far its last index position is from the
    contiguous (last) dimension; a variable with a small cost walks memory."""
    cost = 0
    for v in values:
        for n in postorder(v):
            if isinstance(n, Access) and n.tensor in buffers and n.indices:
                positions = [p for p, ix in enumerate(n.indices) if var in ix.names()]
                if positions:
                    cost += len(n.indices) - 1 - positions[-1]
    return cost


# ---------------------------------------------------------------------------
# Loop shapes
# ---------------------------------------------------------------------------


def fold_bounds(terms: tuple[Affine, ...], lower: bool) -> tuple[Affine, ...]:
    """Merge the constant terms of a ``max`` (lower) or ``min`` (upper) bound and drop repeats."""
    consts = [t.const for t in terms if t.is_constant]
    rest = tuple(dict.fromkeys(t for t in terms if not t.is_constant))
    if not consts:
        return rest
    return (Affine.constant(max(consts) if lower else min(consts)),) + rest


def perfect_nest(loop: For) -> list[For]:
    """``loop`` and the loops perfectly nested inside it (each body one ``For``), outermost first."""
    nest = [loop]
    while len(nest[-1].body) == 1 and isinstance(nest[-1].body[0], For):
        nest.append(nest[-1].body[0])
    return nest


def reduction_band(loop: For) -> list[For] | None:
    """The perfectly nested loops from ``loop`` down whose innermost body only
    binds ``let``s and accumulates into scalars -- a reduction whose loops may
    be reordered or jammed -- or None."""
    band = perfect_nest(loop)
    inner = band[-1].body
    if not inner or not all(isinstance(s, Let) or (isinstance(s, Accumulate) and not s.indices) for s in inner):
        return None
    return band


# ---------------------------------------------------------------------------
# Rewriting: expression mapping and statement substitution
# ---------------------------------------------------------------------------


def map_stmts(body: Sequence[Stmt], fn: Callable[[Stmt], tuple[Stmt, ...]]) -> tuple[Stmt, ...]:
    """``body`` with every statement that is not a loop or a test replaced by
    ``fn`` of it (any number of statements: none drops it); loops and tests
    are rebuilt around their rewritten bodies."""
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, For):
            out.append(replace(s, body=map_stmts(s.body, fn)))
        elif isinstance(s, If):
            out.append(replace(s, then=map_stmts(s.then, fn), orelse=map_stmts(s.orelse, fn)))
        else:
            out.extend(fn(s))
    return tuple(out)


def map_exprs(body: Sequence[Stmt], fn: Callable[[Expr], Expr]) -> tuple[Stmt, ...]:
    """Apply ``fn`` to every scalar expression of a statement list."""

    def leaf(s: Stmt) -> tuple[Stmt, ...]:
        if isinstance(s, Let):
            return (replace(s, value=fn(s.value)),)
        if isinstance(s, Local):
            return (replace(s, init=fn(s.init)),)
        if isinstance(s, (Store, Accumulate)):
            return (replace(s, value=fn(s.value)),)
        if isinstance(s, Extern):
            return (s,)  # no scalar expressions
        raise TypeError(s)  # pragma: no cover

    return map_stmts(body, leaf)


def rename_reads(body: Sequence[Stmt], old: str, new: str) -> tuple[Stmt, ...]:
    """Reads of the scalar ``old`` become reads of ``new``."""
    target = Access(old, ())
    repl = Access(new, ())
    return map_exprs(body, lambda e: transform(e, lambda n: repl if n is target else n))


def _renamed_var(v: str, indices: dict[str, Affine]) -> str:
    """The new name of loop variable ``v`` under ``indices`` (a loop variable may only be renamed)."""
    new = indices.get(v)
    if new is None:
        return v
    if len(new.terms) == 1 and new.const == 0 and new.terms[0][1] == 1 and isinstance(new.terms[0][0], str):
        return new.terms[0][0]
    raise ValueError(f"loop variable '{v}' can only be renamed, not replaced by {new}")


def substitute_stmts(
    body: tuple[Stmt, ...], indices: dict[str, Affine], scalars: dict[str, str] | None = None
) -> tuple[Stmt, ...]:
    """``body`` with index names replaced by affine forms and scalars (``let``/``local``) renamed.

    A loop whose variable maps to a plain variable is renamed with it (that is
    how ``fuse`` unifies two nests); an index mapped to anything else must not
    be a loop variable of ``body`` (``unroll-jam`` substitutes the unrolled
    variable, which is bound outside).
    """
    scalars = scalars or {}

    def aff(items: tuple[Affine, ...]) -> tuple[Affine, ...]:
        return tuple(a.substitute(indices) for a in items)

    def node(n: Expr) -> Expr:
        if isinstance(n, Access):
            name = scalars.get(n.tensor, n.tensor) if not n.indices else n.tensor
            return Access(name, aff(n.indices))
        if isinstance(n, Where):
            return Where(n.cond.substitute(indices), n.then, n.other)
        return n

    def expr(e: Expr) -> Expr:
        return transform(e, node)

    out: list[Stmt] = []
    for s in body:
        if isinstance(s, For):
            out.append(replace(s, var=_renamed_var(s.var, indices), lo=aff(s.lo), hi=aff(s.hi), body=substitute_stmts(s.body, indices, scalars)))
        elif isinstance(s, If):
            out.append(If(s.cond.substitute(indices), substitute_stmts(s.then, indices, scalars),
                          substitute_stmts(s.orelse, indices, scalars)))
        elif isinstance(s, Let):
            out.append(Let(scalars.get(s.name, s.name), expr(s.value)))
        elif isinstance(s, Local):
            out.append(Local(scalars.get(s.name, s.name), expr(s.init)))
        elif isinstance(s, Store):  # ``acc = max(acc, ..)`` stores a local: renamed like an accumulate's target
            buffer = scalars.get(s.buffer, s.buffer) if not s.indices else s.buffer
            out.append(Store(buffer, aff(s.indices), expr(s.value)))
        elif isinstance(s, Accumulate):
            target = scalars.get(s.target, s.target) if not s.indices else s.target
            out.append(Accumulate(target, aff(s.indices), expr(s.value)))
        elif isinstance(s, Extern):
            out.append(s)  # whole buffers: no indices or scalars to rename
        else:  # pragma: no cover - closed set
            raise TypeError(f"not an L2 statement: {s!r}")
    return tuple(out)


# ---------------------------------------------------------------------------
# Moving code: every read in bounds where it goes
# ---------------------------------------------------------------------------


class ReadsInBounds:
    """The rule for every L2 pass that moves code (hoists, extracts, fuses,
    rematerialises, precomputes): the moved statements may run where they did
    not run before, so each of their reads must be in bounds on the *whole*
    domain they move to -- proved from the facts there, not from a test they
    leave behind.  A pass that cannot prove it must keep the code where it
    was, or carry the test along (put it, or a test it implies, around the
    moved code, whose facts are then passed here).

    "Every read" is every load (``x[i, j]``), every store's and accumulate's
    position, and every read of an index array inside an index expression --
    in an access's indices (``x[col[perm[k]]]``: ``perm[k]`` must be a
    position of ``col`` too), in a loop's bounds (``for k in
    ptr[r[d]]..ptr[r[d] + 1] - 1`` reads ``ptr`` twice before the loop runs)
    and in an ``if`` or ``where`` condition.  The compiled code evaluates a
    condition's parts eagerly (``a and b`` is not short-circuit), so each
    read in a condition must be in bounds under the facts *outside* it; a
    ``where``'s and an ``if``'s branches are lazy, so their reads may use the
    condition.  An index array's entry is known only by its declared range
    (``rows(ptr)`` is in ``0..n``: ``n`` for a non-zero no row holds), as
    everywhere in the prover (:class:`tcc.ir.polyhedra.Facts`)."""

    def __init__(self, program: LoopProgram) -> None:
        self.shapes = {b.name: b.shape for b in program.buffers}

    def position_ok(self, name: str, indices: Sequence[Affine], facts: "Facts") -> bool:
        """``name[indices]`` is inside the buffer, and so is every index-array read in the indices."""
        if not self.affines_ok(indices, facts):
            return False
        shape = self.shapes.get(name)
        if shape is None or not indices:
            return True  # a scalar (let/local or 0-d buffer)
        return all(
            facts.implies(Compare(">=", ix, Affine.constant(0))) and facts.implies(Compare("<=", ix, ext - 1))
            for ix, ext in zip(indices, shape)
        )

    def affines_ok(self, items: Iterable[Affine], facts: "Facts") -> bool:
        """Every read of an index array in ``items`` (nested ones too) is inside that array."""
        for a in items:
            for lk in lookups(a):
                shape = self.shapes.get(lk.tensor)
                if shape is None or len(shape) != len(lk.indices):
                    return False
                for ix, ext in zip(lk.indices, shape):
                    if not (facts.implies(Compare(">=", ix, Affine.constant(0))) and facts.implies(Compare("<=", ix, ext - 1))):
                        return False
        return True

    def cond_ok(self, cond: Cond, facts: "Facts") -> bool:
        """Every index-array read of a condition is in bounds (all its parts are evaluated)."""
        return self.affines_ok(_cond_affines(cond), facts)

    def expr_ok(self, e: Expr, facts: "Facts") -> bool:
        if isinstance(e, Access):
            return self.position_ok(e.tensor, e.indices, facts) and all(self.expr_ok(c, facts) for c in e.children())
        if isinstance(e, Where):
            return (self.cond_ok(e.cond, facts) and self.expr_ok(e.then, facts.with_cond(e.cond))
                    and self.expr_ok(e.other, negated(facts, e.cond)))
        return all(self.expr_ok(c, facts) for c in e.children())

    def stmts_ok(self, body: Sequence[Stmt], facts: "Facts") -> bool:
        """Every read of ``body``, run where ``facts`` hold, is in bounds."""
        for s in body:
            if isinstance(s, For):
                if not self.affines_ok(s.lo + s.hi, facts):
                    return False
                if not self.stmts_ok(s.body, facts.with_range(s.var, s.lo, s.hi)):
                    return False
            elif isinstance(s, If):
                if not self.cond_ok(s.cond, facts):
                    return False
                if not self.stmts_ok(s.then, facts.with_cond(s.cond)):
                    return False
                if not self.stmts_ok(s.orelse, negated(facts, s.cond)):
                    return False
            elif isinstance(s, (Store, Accumulate)):
                name = s.buffer if isinstance(s, Store) else s.target
                if not self.position_ok(name, s.indices, facts) or not self.expr_ok(s.value, facts):
                    return False
            elif isinstance(s, Extern):
                continue  # whole buffers of checked shapes: no index
            elif not all(self.expr_ok(e, facts) for e in stmt_exprs(s)):
                return False
        return True


def negated(facts: "Facts", cond: Cond) -> "Facts":
    """The facts of an ``else`` branch: ``cond`` does not hold."""
    try:
        return facts.with_cond(negate(cond))
    except TypeError:  # pragma: no cover - every Cond negates
        return facts


def _cond_affines(c: Cond) -> list[Affine]:
    """The two sides of every comparison in ``c``."""
    if isinstance(c, Compare):
        return [c.lhs, c.rhs]
    if isinstance(c, Not):
        return _cond_affines(c.part)
    return [e for p in getattr(c, "parts", ()) for e in _cond_affines(p)]
