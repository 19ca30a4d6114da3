"""``inverse-index``: derivatives through indirect reads become gathers over an inverse index.

Reverse accumulation of ``y[i, j] = emb[tok[i], j]`` asks, for each element
``w`` of ``emb``, which positions ``i`` read it.  ``sum-liberation`` leaves
that question as a scan (it keeps comparisons of index-array reads as guards,
since the linear solvers cannot use them)::

    demb[w, j] = sum[z: 0..n - 1](where(tok[z] == w, dy[z, j], 0))

which is right but costs O(n) per element of ``emb``.  This pass answers the
question with an inverse index the call builds once (a counting sort of
``tok``, :data:`tcc.ir.program.DERIVED_INDEX`) and reads the bucket of ``w``::

    index tok_ptr[v + 1] <= n = inverse_ptr(tok)
    index tok_perm[n] < n = inverse_perm(tok)
    demb[w, j] = sum[z_p: tok_ptr[w]..tok_ptr[w + 1] - 1](dy[tok_perm[z_p], j])

still a gather (one output element per thread, no atomics), now O(n) in all.
Three rewrites, each exact:

* **bucket**: ``sum[z: lo..hi](... where(t[z] == A, body, 0) ...)`` with a 1-D
  index array ``t`` and ``A`` free of ``z`` becomes the sum over ``t``'s
  bucket of ``A`` (guarded by ``0 <= A <= h``, and by ``lo <= z <= hi`` unless
  that is ``t``'s whole extent);
* **row of an element**: ``sum[i: lo..hi](where(ptr[i] <= A and A <= ptr[i + 1] - 1, body, 0))``
  (a CSR row containing ``A``) is ``body`` at ``i = rows(ptr)[A]``, the one
  row holding ``A`` (``ptr`` is nondecreasing: the runtime checks it);
* **rows flattened**: ``sum[i: lo..hi](F(i) * sum[k: ptr[i]..ptr[i + 1] - 1](G))``
  is ``sum[k: 0..h - 1](F * G)`` at ``i = rows(ptr)[k]`` -- after which a
  bucket rewrite over ``k`` applies (``x[col[k]]`` in CSR).

Each inverse array is declared once per program (``tok_ptr``, ``tok_perm``,
``ptr_row``) and shared by every derivative that needs it.  A program without
index inputs is returned unchanged.  The result is simplified again, so
guards that the definition's ranges imply disappear.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from typing import Callable

from tcc.ir.expr import Access, Binary, Expr, FreshNames, Sum, Where, ZERO, fresh_name, is_zero, transform
from tcc.ir.index import Affine, Compare, Cond, Lookup, Not, conjuncts, make_and
from tcc.ir.program import Program, TensorDecl, derived_shape
from tcc.ir.substitution import substitute
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)

__all__ = ["InverseIndex", "invert"]

_SUFFIX = {"inverse_ptr": "ptr", "inverse_perm": "perm", "rows": "row"}


def guards(e: Expr) -> tuple[list[Cond], Expr]:
    """``e`` as ``where(c1 and c2 ..., core, 0)``: zero-guards pulled out of products and nested guards."""
    if isinstance(e, Where) and is_zero(e.other):
        inner, core = guards(e.then)
        return list(conjuncts(e.cond)) + inner, core
    if isinstance(e, Binary) and e.op == "*":
        left, lcore = guards(e.lhs)
        right, rcore = guards(e.rhs)
        if left or right:
            return left + right, Binary("*", lcore, rcore)
    return [], e


def guarded(conds: list[Cond], core: Expr) -> Expr:
    """``where(conds, core, 0)``, the conditions that only bound an index-array entry (``ptr_row[k] <=
    m - 1``: the element is in a row) in an outer ``where`` of their own.

    A condition of a ``where`` is a fact for its branch, not for the other conditions of the same
    conjunction: ``ptr[ptr_row[k] + 1]`` is in bounds only where ``ptr_row[k] <= m - 1`` holds, so
    that guard must enclose the comparison that reads it (the prover checks it so, and the code
    evaluates the inner condition only there).
    """
    outer = [c for c in conds if _bounds_an_entry(c)]
    inner = make_and([c for c in conds if not _bounds_an_entry(c)])
    if inner is not None:
        core = Where(inner, core, ZERO)
    cond = make_and(outer)
    return core if cond is None else Where(cond, core, ZERO)


def _bounds_an_entry(c: Cond) -> bool:
    """``lookup <= sizes`` or ``lookup >= 0``: a bound on one index-array entry that reads nothing else."""
    if not isinstance(c, Compare) or c.op not in ("<=", ">="):
        return False
    lhs = c.lhs - c.rhs
    lookups_in = [a for a, _ in lhs.terms if isinstance(a, Lookup)]
    return len(lookups_in) == 1 and all(isinstance(a, str) for a, _ in lhs.terms if not isinstance(a, Lookup)) \
        and not any(isinstance(a, Lookup) for ix in lookups_in[0].indices for a, _ in ix.terms)


def _nonnegative(c: Cond) -> Affine | None:
    """``c`` as ``g >= 0`` for an inequality, else None."""
    if not isinstance(c, Compare):
        return None
    return {"<=": c.rhs - c.lhs, ">=": c.lhs - c.rhs, "<": c.rhs - c.lhs - 1, ">": c.lhs - c.rhs - 1}.get(c.op)


def _factors(e: Expr) -> list[Expr]:
    if isinstance(e, Binary) and e.op == "*":
        return _factors(e.lhs) + _factors(e.rhs)
    return [e]


def _product(factors: list[Expr]) -> Expr:
    out = factors[0]
    for f in factors[1:]:
        out = Binary("*", out, f)
    return out


class _Inverter(FreshNames):
    """The rewrites of one program, and the inverse arrays they declared (reused across definitions)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.taken = program.names_in_use()
        self.decls: dict[tuple[str, str], TensorDecl] = {d.derived: d for d in program.derived_inputs()}  # type: ignore[misc]
        self.new: list[TensorDecl] = []

    def array(self, fn: str, src: str) -> TensorDecl:
        """The declaration of ``fn(src)``, created on first use."""
        decl = self.decls.get((fn, src))
        if decl is None:
            name = fresh_name(f"{src}_{_SUFFIX[fn]}", self.taken)
            self.taken.add(name)
            extents, bound = derived_shape(fn, self.decl(src))  # type: ignore[arg-type]
            decl = self.decls[(fn, src)] = TensorDecl(name, extents, None, bound, (fn, src))
            self.new.append(decl)
        return decl

    def read(self, fn: str, src: str, at: Affine) -> Affine:
        decl = self.array(fn, src)
        return Affine.atom(Lookup(decl.name, (at,), decl.index_hi))

    # -- the rewrites ----------------------------------------------------------
    def rewrite(self, node: Expr) -> Expr:
        if isinstance(node, Where):  # in conditions; a read keeps t[...], whose bound proves it in bounds,
            node = map_affines(node, self.sorted_entry)
        elif isinstance(node, Access):  # except inside another lookup, where a guard rewritten above
            node = map_affines(node, self.nested_sorted_entry)  # must read the same thing to protect it
        if not isinstance(node, Sum) or not node.has_range:
            return node
        out = self.row_of_element(node) or self.row_inside(node) or self.rows_flattened(node) or self.bucket(node)
        if out is None:
            return node
        return transform(out, self.rewrite) if out is not node else node

    def sorted_entry(self, a: Affine) -> Affine:
        """``t[inverse_perm(t)[x]]`` is ``rows(inverse_ptr(t))[x]``: the entry at the x-th position in
        sorted order is the bucket x falls in.  A second derivative reads that, and as a row array it
        has a bucket of its own that needs no further sort (:meth:`bucket`)."""
        def atom(x: object) -> Affine:
            if not isinstance(x, Lookup):
                return Affine.atom(x) if not isinstance(x, str) else Affine.var(x)
            inner = tuple(ix.map_atoms(atom) for ix in x.indices)
            (only,) = inner if len(inner) == 1 else (None,)
            if only is not None and len(only.terms) == 1 and not only.const and only.terms[0][1] == 1:
                perm = only.terms[0][0]
                if isinstance(perm, Lookup) and self.derived_from(perm.tensor) == ("inverse_perm", x.tensor):
                    ptr = self.array("inverse_ptr", x.tensor)
                    return self.read("rows", ptr.name, perm.indices[0])
            return Affine.atom(Lookup(x.tensor, inner, x.hi))

        return a.map_atoms(atom) if any(isinstance(t, Lookup) for t, _ in a.terms) else a

    def nested_sorted_entry(self, a: Affine) -> Affine:
        """:meth:`sorted_entry` inside the indices of ``a``'s lookups, not of ``a`` itself:
        ``dy[ptr_row[col_perm[col_perm_perm[k]]]]`` reads ``ptr_row[col_perm_ptr_row[k]]``, as its
        guard ``ptr_row[col_perm_ptr_row[k]] <= m - 1`` does, while ``emb[tok[tok_perm[p]]]`` stays."""
        def atom(x: object) -> Affine:
            if isinstance(x, Lookup):
                return Affine.atom(Lookup(x.tensor, tuple(self.sorted_entry(ix) for ix in x.indices), x.hi))
            return Affine.atom(x) if not isinstance(x, str) else Affine.var(x)

        return a.map_atoms(atom) if any(isinstance(t, Lookup) for t, _ in a.terms) else a

    def decl(self, name: str) -> TensorDecl | None:
        """An input of the program, or an index array this pass declared."""
        return self.program.input(name) or next((d for d in self.new if d.name == name), None)

    def derived_from(self, name: str) -> tuple[str, str] | None:
        decl = self.decl(name)
        return None if decl is None else decl.derived

    def one_dim_index(self, name: str) -> TensorDecl | None:
        """A one-dimensional index array of the program, or one this pass declared."""
        decl = self.decl(name)
        return decl if decl is not None and decl.is_index and len(decl.extents) == 1 else None

    def bucket(self, s: Sum) -> Expr | None:
        conds, core = guards(s.body)
        z = s.var
        for c in conds:
            if not isinstance(c, Compare) or c.op != "==":
                continue
            diff = c.lhs - c.rhs
            for atom, coeff in diff.terms:
                t = self.one_dim_index(atom.tensor) if isinstance(atom, Lookup) else None
                if t is None or atom.indices != (Affine.var(z),) or abs(coeff) != 1:
                    continue
                rest = diff - Affine.atom(atom) * coeff
                if z in rest.names():
                    continue
                target = rest * -coeff  # t[z] == target
                if t.derived is not None and t.derived[0] == "rows":  # the positions in row `target` of P
                    return self.row_bucket(s, t, target, [d for d in conds if d is not c], core)
                p = self.fresh(f"{z}_p")
                at = Affine.atom(Lookup(self.array("inverse_perm", t.name).name, (Affine.var(p),), t.extents[0] - 1))
                keep = [d for d in conds if d is not c] + self.range_guards(Affine.var(z), s, t.extents[0] - 1)
                body = substitute(guarded(keep, core), {z: at})
                lo, hi = self.read("inverse_ptr", t.name, target), self.read("inverse_ptr", t.name, target + 1) - 1
                inner = Sum(p, (lo,), (hi,), body)
                return guarded([Compare(">=", target, Affine.constant(0)), Compare("<=", target, t.index_hi)], inner)
        return None

    def row_bucket(self, s: Sum, t: TensorDecl, target: Affine, keep: list[Cond], core: Expr) -> Expr:
        """``sum[z](where(rows(P)[z] == A, body, 0))`` is ``body`` summed over ``z`` in ``P[A]..P[A + 1] - 1``."""
        src = self.decl(t.derived[1])  # type: ignore[index]
        assert src is not None
        lo = Affine.atom(Lookup(src.name, (target,), src.index_hi))
        hi = Affine.atom(Lookup(src.name, (target + 1,), src.index_hi)) - 1
        body = guarded(keep + self.range_guards(Affine.var(s.var), s, t.extents[0] - 1), core)
        m = src.extents[0] - 1
        return guarded([Compare(">=", target, Affine.constant(0)), Compare("<=", target, m - 1)], Sum(s.var, (lo,), (hi,), body))

    @staticmethod
    def range_guards(v: Affine, s: Sum, top: Affine) -> list[Cond]:
        """``lo <= v <= hi`` of the sum ``s``, unless that is the whole ``0..top`` the replacement spans."""
        if s.lo == (Affine.constant(0),) and s.hi == (top,):
            return []
        return [Compare("<=", lo, v) for lo in s.lo] + [Compare("<=", v, hi) for hi in s.hi]

    def row_pointer(self, lo: Affine, hi: Affine, i: str) -> TensorDecl | None:
        """``ptr`` when ``lo..hi`` is ``ptr[i]..ptr[i + 1] - 1`` for a 1-D index array ``ptr``."""
        if len(lo.terms) != 1 or lo.const or lo.terms[0][1] != 1 or not isinstance(lo.terms[0][0], Lookup):
            return None
        first = lo.terms[0][0]
        ptr = self.one_dim_index(first.tensor)
        if ptr is None or first.indices != (Affine.var(i),):
            return None
        nxt = Affine.atom(Lookup(first.tensor, (Affine.var(i) + 1,), first.hi)) - 1
        return ptr if hi == nxt else None

    def row_guards(self, row: Affine, s: Sum, ptr: TensorDecl) -> list[Cond]:
        """The replaced row is a row (not ``m``: no row holds the element) inside the sum's range."""
        m = ptr.extents[0] - 1
        return [Compare("<=", row, m - 1)] + self.range_guards(row, s, m - 1)

    def row_of_element(self, s: Sum) -> Expr | None:
        conds, core = guards(s.body)
        i = s.var
        lows = [(c, g) for c in conds if (g := _nonnegative(c)) is not None]
        for c1, g1 in lows:  # g1 = A - ptr[i]
            for atom, coeff in g1.terms:
                if coeff != -1 or not isinstance(atom, Lookup):
                    continue
                a = g1 + Affine.atom(atom)
                ptr = self.row_pointer(Affine.atom(atom), Affine.atom(Lookup(atom.tensor, (Affine.var(i) + 1,), atom.hi)) - 1, i)
                if ptr is None or i in a.names():
                    continue
                end = Affine.atom(Lookup(atom.tensor, (Affine.var(i) + 1,), atom.hi)) - 1 - a
                c2 = next((c for c, g in lows if g == end), None)
                if c2 is None:
                    continue
                row = self.read("rows", ptr.name, a)
                keep = [d for d in conds if d is not c1 and d is not c2]
                body = substitute(guarded(keep + self.row_guards(Affine.var(i), s, ptr), core), {i: row})
                in_range = [Compare(">=", a, Affine.constant(0)), Compare("<=", a, ptr.index_hi - 1)]
                return guarded(in_range, body)
        return None

    def row_inside(self, s: Sum) -> Expr | None:
        """``sum[i](F(i) * sum[p: lo..hi](where(ptr[i] <= A(p) <= ptr[i + 1] - 1, G, 0)))``, the inner
        bounds free of ``i``: the sums swapped, and ``i`` the row of ``A(p)`` (a bucket over a CSR column)."""
        conds, core = guards(s.body)
        factors = _factors(core)
        for n, f in enumerate(factors):
            if not isinstance(f, Sum) or not f.has_range or s.var in {x for b in f.lo + f.hi for x in b.names()}:
                continue
            inner = Sum(s.var, s.lo, s.hi, guarded(conds, _product(factors[:n] + [f.body] + factors[n + 1:])))
            row = self.row_of_element(inner)
            if row is not None:
                return Sum(f.var, f.lo, f.hi, row)
        return None

    def rows_flattened(self, s: Sum) -> Expr | None:
        conds, core = guards(s.body)
        factors = _factors(core)
        i = s.var
        for n, f in enumerate(factors):
            if not (isinstance(f, Sum) and len(f.lo) == 1 and len(f.hi) == 1):
                continue
            ptr = self.row_pointer(f.lo[0], f.hi[0], i)
            if ptr is None:
                continue
            k = f.var
            others = factors[:n] + [f.body] + factors[n + 1:]
            row = self.read("rows", ptr.name, Affine.var(k))
            body = substitute(guarded(conds + self.row_guards(Affine.var(i), s, ptr), _product(others)), {i: row})
            return Sum(k, (Affine.constant(0),), (ptr.index_hi - 1,), body)
        return None


def map_affines(e: Expr, fn: Callable[[Affine], Affine]) -> Expr:
    """The node with ``fn`` applied to its own index expressions (reads, where conditions, sum bounds)."""
    if isinstance(e, Access) and e.indices:
        new = tuple(fn(ix) for ix in e.indices)
        return e if new == e.indices else Access(e.tensor, new)
    if isinstance(e, Where):
        cond = _map_cond(e.cond, fn)
        return e if cond == e.cond else Where(cond, e.then, e.other)
    if isinstance(e, Sum) and e.has_range:
        lo, hi = tuple(fn(b) for b in e.lo), tuple(fn(b) for b in e.hi)
        return e if (lo, hi) == (e.lo, e.hi) else Sum(e.var, lo, hi, e.body)
    return e


def _map_cond(c: Cond, fn: Callable[[Affine], Affine]) -> Cond:
    if isinstance(c, Compare):
        return Compare(c.op, fn(c.lhs), fn(c.rhs))
    if isinstance(c, Not):
        return Not(_map_cond(c.part, fn))
    return type(c)(tuple(_map_cond(p, fn) for p in c.parts))  # type: ignore[attr-defined, call-arg]


def invert(program: Program) -> Program:
    """``program`` with every scan through an index array rewritten over an inverse index."""
    if not program.index_inputs():
        return program
    inv = _Inverter(program)
    defs = [d.with_body(transform(d.body, inv.rewrite)) for d in program.definitions]
    if not inv.new:
        return program
    from tcc.passes.simplify import simplify_program  # the guards the ranges imply go

    inputs = list(program.inputs)
    for decl in inv.new:  # right after the array each is derived from, so sources come first
        src = next(k for k, d in enumerate(inputs) if d.name == decl.derived[1])  # type: ignore[index]
        while src + 1 < len(inputs) and inputs[src + 1].is_derived:
            src += 1
        inputs.insert(src + 1, decl)
    return simplify_program(program.replace(inputs=tuple(inputs), definitions=tuple(defs)))


@dataclass(frozen=True)
class InverseIndex(Pass):
    """Scans through index arrays in derivatives -> gathers over inverse indices the call builds."""

    name = "inverse-index"
    level = Level.INDEX
    summary = "derivatives through indirect reads: scans become gathers over a counting-sort inverse index"

    def run(self, program: Program, ctx: PassContext) -> Program:
        return invert(program)
