"""The matmul and matrix-vector matchers of ``blas`` (the rules are in the package docstring, passes/blas/__init__.py)."""
from __future__ import annotations

import logging
import math

from tcc.ir.expr import (
    GRAM,
    ONE,
    Access,
    Binary,
    Expr,
    FreshNames,
    MatrixFn,
    Sum,
    Unary,
    Where,
    bound_vars,
    free_names,
    fresh_name,
    postorder,
    transform,
)
from tcc.ir.substitution import substitute
from tcc.ir.index import Affine, Compare, of_sizes
from tcc.ir.polyhedra import program_facts
from tcc.ir.program import Definition, Program

from .window import window_contraction
from .contract import COPY_COST, contraction
from .reuse import reuse_outlined

__all__ = ["DEFAULT_MIN_WORK", "Rewriter"]

#: the ``blas`` pass's logger (``tcc.passes.blas``): at DEBUG, why a definition or a sum stayed loops
logger = logging.getLogger(__package__)

#: p * q * r below which a constant-size product stays a loop nest
DEFAULT_MIN_WORK = 32768


class _NoMatch(Exception):
    """The definition is not a matrix product of the supported shape.

    It carries why, as a %-format and its arguments: the text is built only
    when a log record is emitted (declines are frequent, logging usually off).
    """

    def __init__(self, fmt: str = "not a matrix product", *args: object) -> None:
        super().__init__(fmt, *args)
        self.fmt, self.fmt_args = fmt, args

    def __str__(self) -> str:
        return self.fmt % tuple(_show(a) if isinstance(a, Expr) else a for a in self.fmt_args)


def _show(e: Expr, limit: int = 60) -> str:
    """``e`` printed, cut to ``limit`` characters: enough to find it in ``--dump-before blas``."""
    text = str(e)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _work(extents: tuple[Affine, ...]) -> str:
    """The multiply-add count ``p * q * r`` of a product, for a min-work decline."""
    return " * ".join(str(e.const) for e in extents) + f" = {math.prod(e.const for e in extents)}"


def _factors(e: Expr, sizes: set[str], a: str, b: str, negated: bool, out: list[Expr], keep_sums: bool = False) -> bool:
    """Split ``e`` into factors none of which depends on both ``a`` and ``b``.

    Products and negations are flattened; appends the factors to ``out`` in
    order and returns ``negated`` flipped once per negation passed.  A
    quotient is split only if it mixes ``a`` and ``b``; with ``keep_sums`` a
    ``sum`` (the contraction itself) is one factor.
    """
    # Left to right with an explicit stack (a long product is a deep tree); an
    # item is a node to split or, for a quotient, the divisor to append once
    # its numerator's factors are out.
    stack: list[tuple[bool, Expr]] = [(False, e)]
    while stack:
        emit, x = stack.pop()
        if emit:
            out.append(x)
        elif isinstance(x, Binary) and x.op == "*":
            stack.append((False, x.rhs))
            stack.append((False, x.lhs))
        elif isinstance(x, Unary) and x.op == "neg":
            negated = not negated
            stack.append((False, x.operand))
        else:
            names = set(free_names(x)) - sizes
            if not ({a, b} <= names) or (keep_sums and isinstance(x, Sum)):
                out.append(x)
            elif isinstance(x, Binary) and x.op == "/":
                if {a, b} <= set(free_names(x.rhs)) - sizes:
                    raise _NoMatch("the divisor of %s depends on both %s and %s", x, a, b)
                stack.append((True, Binary("/", ONE, x.rhs)))
                stack.append((False, x.lhs))
            else:
                raise _NoMatch("the factor %s depends on both %s and %s", x, a, b)
    return negated


def _reads_flipped(factors: list[Expr], first: str, second: str) -> bool:
    """Whether most accesses of ``factors`` that use both indices put ``second`` before ``first``.

    An outlined side is then defined as ``S[second, first]`` and passed as
    ``transpose(S)``: its kernel writes in the order its operands are read
    (the dense layer's ``dW_lhs[c, z] = dY[z, c] * ...`` becomes
    ``dW_lhs[z, c]``, the same nest as ``dX_lhs[a, z]``, which ``fuse`` merges).
    """
    votes = 0
    for f in factors:
        for n in postorder(f):
            if isinstance(n, Access):
                pos = {v: k for k, ix in enumerate(n.indices) for v in ix.names()}
                if first in pos and second in pos and pos[first] != pos[second]:
                    votes += 1 if pos[second] < pos[first] else -1
    return votes > 0


def _product(factors: list[Expr], negated: bool) -> Expr:
    body = factors[0]
    for f in factors[1:]:
        body = Binary("*", body, f)
    return Unary("neg", body) if negated else body


class Rewriter(FreshNames):
    def __init__(self, program: Program, min_work: int, copy_cost: float = COPY_COST) -> None:
        self.program = program
        self.min_work = min_work
        self.copy_cost = copy_cost
        self.sizes = set(program.sizes())
        self.facts = program_facts(self.sizes)
        self.taken = program.names_in_use()
        # outlined sides by (body over canonical index names, extents): an equal one is reused
        self.outlined: dict[tuple, str] = {}
        self.products: dict[tuple, str] = {}  # (matmul body, rows) -> the matrix-vector product computing it
        self.canon: tuple[Affine, ...] = ()
        self.made: dict[str, tuple[Affine, ...]] = {}  # extents of the outlined sides (not in program)

    def extents(self, name: str) -> tuple[Affine, ...]:
        """A tensor's extents: the program's, or those of a side outlined here (``()``: unknown)."""
        return tuple(self.program.extents_of(name) or self.made.get(name) or ())

    def canonical(self, k: int) -> Affine:
        """The ``k``-th index name outlined sides are compared under (see :meth:`outline`)."""
        while len(self.canon) <= k:
            self.canon += (Affine.var(self.fresh(f"_blas_{len(self.canon)}")),)
        return self.canon[k]

    def plain(self, factors: list[Expr], negated: bool, first: str, second: str,
              extents: tuple[Affine, Affine], batch: tuple[str, ...] = (),
              bext: tuple[Affine, ...] = ()) -> tuple[str, bool] | None:
        """``(P, False)`` if a side is exactly ``P[batch..., first, second]`` with the side's extents,
        ``(P, True)`` if it is ``P[batch..., second, first]`` with the last two reversed (read
        transposed); with a batch, also ``P[first, second]`` (``P[second, first]``): one matrix
        for every member of the batch."""
        if negated or len(factors) != 1 or not isinstance(factors[0], Access):
            return None
        acc = factors[0]
        ext = self.extents(acc.tensor)
        if not ext or first == second:
            return None
        pair = (Affine.var(first), Affine.var(second))
        leads = [(tuple(Affine.var(x) for x in batch), bext)] + ([((), ())] if batch else [])
        for lead, lead_ext in leads:
            for flip in (False, True):
                want = lead + (pair[::-1] if flip else pair), lead_ext + (extents[::-1] if flip else extents)
                if acc.indices == want[0] and tuple(ext) == want[1]:
                    return acc.tensor, flip
        return None

    def rewrite(self, d: Definition) -> list[Definition]:
        """``[d]`` unchanged, or the new definitions followed by ``d`` as a ``matmul`` or an epilogue."""
        if d.extents is None or isinstance(d.body, MatrixFn):
            return [d]
        d = reuse_outlined(d, self.outlined, self.canon, self.sizes)  # db = sum[a](dX_lhs[a, c])
        if len(d.indices) >= 2:
            try:
                new = self.match(d)
                logger.info("%s: now %s", d.name, new[-1].body)
                return new
            except _NoMatch as why:
                logger.debug("%s: not a matrix product as a whole: %s; looking at its sums", d.name, why)
        return self.split(d)

    def declined(self, d: Definition, s: Expr, what: str, why: str, *args: object) -> None:
        """Log (DEBUG) why the sum ``s`` inside ``d`` did not become ``what``; returns ``None``
        so that a matcher can ``return self.declined(...)``."""
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s: %s not %s: %s", d.name, _show(s), what, str(_NoMatch(why, *args)))
        return None

    def split(self, d: Definition) -> list[Definition]:
        """The epilogue split: each matchable contraction inside ``d``'s body becomes a definition of its own.

        A contraction is a ``sum`` whose free indices are two or more of
        ``d``'s; it is tried outermost first (a sum that does not match is
        searched for matching sums inside it).  Each one that :meth:`match`
        accepts as the body of ``<D>_mm[batch..., x, y]`` (``d``'s extents;
        ``x``, ``y`` the last two of its indices in ``d``'s order, else any
        other two, the rest the batch in ``d``'s order) becomes that
        definition -- and its ``matmul`` -- and ``d`` reads it in its place.
        """
        assert d.extents is not None
        extent = dict(zip(d.indices, d.extents))
        out: list[Definition] = []
        mapping: dict[Expr, Expr] = {}
        stack = [d.body]
        seen: set[int] = set()
        memo: dict[Expr, tuple[str, ...]] = {}
        while stack:
            e = stack.pop()
            if id(e) in seen or e in mapping:
                continue
            seen.add(id(e))
            if set(bound_vars(e)) & set(d.indices) or isinstance(e, Where):
                # a sum that shadows an index of d reads another variable inside; a guarded
                # contraction is computed only where its guard holds (a Hessian's diagonal block)
                if isinstance(e, Where) and logger.isEnabledFor(logging.DEBUG) and any(
                        isinstance(n, Sum) for n in postorder(e)):
                    logger.debug("%s: the sums inside %s stay loops: a where guards them", d.name, _show(e))
                continue
            free = set(free_names(e, memo)) if isinstance(e, Sum) else set()  # memo: linear on deep bodies
            names = [x for x in d.indices if x in free]
            if len(names) >= 2 and not free - self.sizes - set(names):
                name = fresh_name(f"{d.name}_mm", self.taken)
                first: _NoMatch | None = None
                for order in _orders(names):
                    try:
                        new = self.match(Definition(name, order, e, tuple(extent[x] for x in order), d.loc))
                    except _NoMatch as why:
                        first = first or why
                        continue
                    self.taken.add(name)
                    out.extend(new)
                    mapping[e] = Access(name, tuple(Affine.var(x) for x in order))
                    break
                if e in mapping:
                    continue
                if first is not None and logger.isEnabledFor(logging.DEBUG):  # the preferred order's reason
                    self.declined(d, e, f"a matmul over ({', '.join(names[-2:])})", "%s", first)
            elif len(names) == 1 and not free - self.sizes - set(names):
                found = self.matvec(d, e, names[0], extent[names[0]], out)
                if found is not None:
                    mapping[e] = found
                    continue
            if isinstance(e, Sum) and isinstance(e.body, Sum):  # x^T A x: sum[i](x[i] * sum[j](A[i, j] * x[j]))
                found = self.nested_matvec(d, e, out)
                if found is not None:
                    mapping[e] = found
                    continue
            if isinstance(e, Sum) and not free - self.sizes - set(names):  # several contracted indices, ...
                fn = contraction(tuple(names), tuple(extent[x] for x in names), e, self.program, self.sizes,
                                 self.facts, self.min_work, self.copy_cost) or window_contraction(
                    tuple(names), tuple(extent[x] for x in names), e, self.program, self.sizes, self.facts,
                    self.min_work)
                if fn is None and len(names) >= 2:
                    self.declined(d, e, "a contraction", "not two plain reads, or the cost model keeps the loops")
                if fn is not None and e is d.body and tuple(names) == d.indices:
                    return [d.with_body(fn)]  # the whole body: D itself is the contraction
                if fn is not None:
                    name = self.fresh(f"{d.name}_mm")
                    out.append(Definition(name, tuple(names), fn, tuple(extent[x] for x in names), d.loc))
                    mapping[e] = Access(name, tuple(Affine.var(x) for x in names))
                    continue
            stack.extend(reversed(e.children()))
        if not mapping:
            return [d]
        logger.info("%s: %s outlined", d.name, ", ".join(x.name for x in out))
        return out + [d.with_body(transform(d.body, lambda n: mapping.get(n, n)))]

    def nested_matvec(self, d: Definition, e: Sum, out: list[Definition]) -> Expr | None:
        """``sum[i](sum[j](F))`` whose factors on ``j`` are a matrix-vector product over ``j`` (a plain
        ``M[i, j]`` or ``M[j, i]`` times factors on ``j`` alone): that product becomes a
        :meth:`matvec` and the outer sum reads it -- the quadratic form ``x^T A x`` is one BLAS
        ``gemv`` and a dot product of length n, reading ``A`` once at BLAS speed (issue 13 item 4)."""
        inner = e.body
        assert isinstance(inner, Sum)
        i, j = e.var, inner.var
        if e.lo != (Affine.constant(0),) or len(e.hi) != 1 or not of_sizes(e.hi[0], self.sizes):
            return None
        if any(i in b.names() for b in inner.lo + inner.hi):
            return None
        factors: list[Expr] = []
        negated = _factors(inner.body, self.sizes, i, "", False, factors)
        jpart = [f for f in factors if j in free_names(f)]
        rest = [f for f in factors if j not in free_names(f)]
        if not jpart or not any(i in free_names(f) for f in jpart):
            return None
        found = self.matvec(d, Sum(j, inner.lo, inner.hi, _product(jpart, False)), i, e.hi[0] + 1, out)
        if found is None:
            return None
        return Sum(i, e.lo, e.hi, _product(rest + [found], negated))

    def matvec(self, d: Definition, s: Expr, x: str, p: Affine, out: list[Definition]) -> Expr | None:
        """A product of a matrix and a vector, ``sum[z](M[x, z] * v[z])`` (``M`` possibly read as
        ``M[z, x]``), as ``<D>_mm[x, u] = matmul(M, V)[x, u]`` with ``V[z, u] = v[z]`` and ``u`` a
        unit index (extent 1): NumPy runs a matrix times an ``n x 1`` one as a matrix-vector
        product.  Returns the access ``<D>_mm[x, 0]`` that replaces ``s``, or ``None``."""
        if not isinstance(s, Sum):
            return None
        mv = "a matrix-vector product"
        if len(s.hi) != 1 or s.lo != (Affine.constant(0),) or not of_sizes(s.hi[0], self.sizes):
            return self.declined(d, s, mv, "sum[%s]'s range is not 0..N - 1 with N over sizes", s.var)
        z, q = s.var, s.hi[0] + 1
        if not self.facts.implies(Compare(">=", q, Affine.constant(0))):
            return self.declined(d, s, mv, "sum[%s]'s range may be empty", z)
        if p.is_constant and q.is_constant and p.const * q.const < self.min_work:  # a call costs more
            return self.declined(d, s, mv, "tiny: %s multiply-adds < min-work %d", _work((p, q)), self.min_work)
        factors: list[Expr] = []
        negated = _factors(s.body, self.sizes, x, "", False, factors)  # "": no factor mixes a pair
        k = 0
        while k < len(factors):  # (x[z] * A[x, z]) / c: the divisor is a factor of its own
            f = factors[k]
            if isinstance(f, Binary) and f.op == "/" and f.lhs != ONE and not {x, z} <= set(free_names(f.rhs)):
                sub: list[Expr] = []
                negated = _factors(f.lhs, self.sizes, x, "", negated, sub)
                factors[k:k + 1] = sub + [Binary("/", ONE, f.rhs)]
            else:
                k += 1
        if any(set(free_names(f)) - self.sizes - {x, z} for f in factors):  # a bound variable of an inner sum
            return self.declined(d, s, mv, "a factor depends on a variable other than %s and %s", x, z)
        # a factor free of z (on x, or a scalar such as a seed `df`) scales the product outside the call:
        # inside the outlined vector it would make `df * x[z]` a side of its own, which `reuse` cannot
        # share with the plain `x[z]` of the value's product (the quadratic form's third gemv)
        scale = [f for f in factors if z not in free_names(f)]
        mat = [f for f in factors if x in free_names(f) and z in free_names(f)]
        vec = [f for f in factors if x not in free_names(f) and z in free_names(f)]
        matrix = self.plain(mat, False, x, z, (p, q))
        if matrix is None:  # an outlined matrix would cost as much memory traffic as the loops
            return self.declined(d, s, mv, "the matrix side is not one plain read %s[%s, %s] or its transpose",
                                 "P", x, z)
        if not any(z in free_names(f) for f in vec):
            return self.declined(d, s, mv, "the vector side does not mention %s", z)
        u = self.fresh("_u")
        one = Affine.constant(1)
        rhs = self.outline(d, vec, negated, (z, u), (q, one), ((), ()), "rhs", out)
        body = MatrixFn("matmul", matrix[0], rhs[0], transposed=(matrix[1], rhs[1]))
        name = self.products.get((body, p))
        if name is None:  # the quadratic form's value and gradient both need A x: one gemv
            name = self.products[(body, p)] = self.fresh(f"{d.name}_mm")
            out.append(Definition(name, (x, u), body, (p, one), d.loc))
        return _product([Access(name, (Affine.var(x), Affine.constant(0)))] + scale, False)

    def contraction(self, d: Definition) -> tuple[list[Expr], bool, Sum]:
        """``d``'s factors (those outside the one sum, then the summand's, as written), whether an
        odd number of negations was passed, and the sum; checks its range and ``min-work``."""
        *batch, a, b = d.indices
        assert d.extents is not None
        outer: list[Expr] = []  # D = c * u[a] * sum[z](F) * v[b] (each on a, on b, or on neither)
        negated = _factors(d.body, self.sizes, a, b, False, outer, keep_sums=True)
        sums = [f for f in outer if isinstance(f, Sum) and {a, b} <= set(free_names(f))]
        if len(sums) != 1:
            raise _NoMatch("the body is not one sum over %s and %s times factors (%d such sums)", a, b, len(sums))
        s = sums[0]
        at = outer.index(s)
        zero = Affine.constant(0)
        if s.lo != (zero,) or len(s.hi) != 1 or not of_sizes(s.hi[0], self.sizes):
            raise _NoMatch("sum[%s]'s range is not 0..N - 1 with N over sizes", s.var)
        q = s.hi[0] + 1
        if not self.facts.implies(Compare(">=", q, zero)):
            raise _NoMatch("sum[%s]'s range may be empty", s.var)  # L and R would get negative extents
        work = tuple(d.extents) + (q,)
        if all(e.is_constant for e in work) and math.prod(e.const for e in work) < self.min_work:
            raise _NoMatch("tiny: %s multiply-adds < min-work %d", _work(work), self.min_work)
        inner: list[Expr] = []
        negated = _factors(s.body, self.sizes, a, b, negated, inner)
        return outer[:at] + inner + outer[at + 1:], negated, s

    def match(self, d: Definition) -> list[Definition]:
        """``d`` as ``matmul`` of two sides (``d``'s last two indices the product's, the rest its batch)."""
        factors, negated, s = self.contraction(d)
        *batch, a, b = d.indices
        assert d.extents is not None
        if not batch:
            gram = self.gram(d, factors, negated, s)
            if gram is not None:
                return gram
        *bext, p, r = d.extents
        z, q = s.var, s.hi[0] + 1
        side: dict[int, str] = {}
        on_batch: dict[int, bool] = {}
        for k, f in enumerate(factors):
            names = set(free_names(f)) - self.sizes
            if {a, b} <= names:
                raise _NoMatch("the factor %s depends on both %s and %s", f, a, b)
            if names - {*batch, a, b, z}:  # say the variable of an inner sum
                raise _NoMatch("the factor %s depends on %s", f, ", ".join(sorted(names - {*batch, a, b, z})))
            side[k] = "left" if a in names else "right" if b in names else ""
            on_batch[k] = bool(names & set(batch))
        left = [f for k, f in enumerate(factors) if side[k] == "left"]
        right = [f for k, f in enumerate(factors) if side[k] == "right"]
        shape = (tuple(batch), tuple(bext))
        # factors on z, the batch or nothing, and a negation, go left -- unless the left is a
        # plain read P[a, z] and the right needs a definition of its own anyway
        to_right = (self.plain(left, False, a, z, (p, q), *shape) is not None and bool(right)
                    and self.plain(right, False, z, b, (q, r), *shape) is None)
        extra = "right" if to_right else "left"
        ks = {w: [k for k in side if side[k] == w or (not side[k] and extra == w)] for w in ("left", "right")}
        left, right = ([factors[k] for k in ks[w]] for w in ("left", "right"))
        for what, fs in (("left", left), ("right", right)):
            if not any(z in free_names(f) for f in fs):
                raise _NoMatch("the %s side does not mention %s", what, z)
        if batch and not any(on_batch[k] for k in side):
            raise _NoMatch("neither side varies along the batch %s", ", ".join(batch))
        for what, fs in (("left", left), ("right", right)):
            on = set(batch) & {n for f in fs for n in free_names(f)}
            if on and on != set(batch):  # outlined, it would be repeated over the rest of the batch
                raise _NoMatch("the %s side varies along %s but not along all of the batch %s", what,
                               ", ".join(x for x in batch if x in on), ", ".join(batch))
        out: list[Definition] = []
        lhs = self.outline(d, left, negated and not to_right, (a, z), (p, q), shape, "lhs", out)
        rhs = self.outline(d, right, negated and to_right, (z, b), (q, r), shape, "rhs", out)
        body = MatrixFn("matmul", lhs[0], rhs[0], transposed=(lhs[1], rhs[1]))
        out.append(Definition(d.name, d.indices, body, d.extents, d.loc))
        return out

    def gram(self, d: Definition, factors: list[Expr], negated: bool, s: Sum) -> list[Definition] | None:
        """``sum[z](P[z, a] * <factors on z or on nothing> * P[z, b])`` as ``gram(P, W)`` with
        ``W[z]`` the product of the weights (a plain ``V[z]`` is read as it is): the symmetric
        product of a second derivative, which the runtime gives to ``syrk`` when the weights
        are >= 0 (tcc.runtime.externs.gram_kernel).  Without weights ``matmul(transpose(P), P)`` is syrk already."""
        a, b = d.indices
        z, q = s.var, s.hi[0] + 1
        assert d.extents is not None
        pair = [f for f in factors if {a, b} & set(free_names(f))]
        weights = [f for f in factors if not {a, b} & set(free_names(f))]
        if len(pair) != 2 or not all(isinstance(f, Access) for f in pair) or d.extents[0] != d.extents[1]:
            return None
        if not weights or any(set(free_names(f)) - self.sizes - {z} for f in weights):
            return None
        reads = {f.tensor for f in pair}  # type: ignore[union-attr]
        (tensor,) = reads if len(reads) == 1 else (None,)
        zv, av, bv = Affine.var(z), Affine.var(a), Affine.var(b)
        if tensor is None or {f.indices for f in pair} != {(zv, av), (zv, bv)}:  # type: ignore[union-attr]
            return None
        if self.extents(tensor) != (q, d.extents[0]):
            return None
        out: list[Definition] = []
        w = weights[0] if len(weights) == 1 and not negated else None
        if not (isinstance(w, Access) and w.indices == (zv,)
                and self.extents(w.tensor) == (q,)):
            name = self.fresh(f"{d.name}_w")
            self.made[name] = (q,)
            out.append(Definition(name, (z,), _product(weights, negated), (q,), d.loc))
            w = Access(name, (zv,))
        out.append(Definition(d.name, d.indices, MatrixFn(GRAM, tensor, w.tensor), d.extents, d.loc))
        return out

    def outline(self, d: Definition, fs: list[Expr], neg: bool, pair: tuple[str, str], ext: tuple[Affine, Affine],
                shape: tuple[tuple[str, ...], tuple[Affine, ...]], suffix: str, out: list[Definition]) -> tuple[str, bool]:
        """The tensor a side reads and whether it is read transposed, appending its definition
        to ``out`` when it needs one.

        The definition is stored the way round most of its accesses read
        ``pair`` (a contiguous write), has the batch indices first when a
        factor depends on one (else it is one matrix for the whole batch),
        and is reused when an equal side (same body and extents, up to index
        names) was outlined before.
        """
        first, second = pair
        read = self.plain(fs, neg, first, second, ext, *shape)
        if read is not None:
            return read
        batch, bext = shape
        if not any(set(batch) & set(free_names(f)) for f in fs):
            batch, bext = (), ()
        flip = _reads_flipped(fs, first, second)
        idx = tuple(batch) + ((second, first) if flip else (first, second))
        extents = tuple(bext) + (ext[::-1] if flip else ext)
        body = _product(fs, neg)
        key = (substitute(body, {x: self.canonical(k) for k, x in enumerate(idx)}), extents)
        if key not in self.outlined:  # the gradients of X W^T read dY * (1 - Y^2) both ways round: one
            self.outlined[key] = self.fresh(f"{d.name}_{suffix}")
            self.made[self.outlined[key]] = extents
            out.append(Definition(self.outlined[key], idx, body, extents, d.loc))
        return self.outlined[key], flip


def _orders(names: list[str]) -> list[tuple[str, ...]]:
    """Index orders ``batch + (x, y)`` to try a contraction on ``names`` in: the last two as the
    product's first, then every other pair; the batch keeps the order of ``names``."""
    pairs = [(names[-2], names[-1])] + [
        (x, y) for x in names for y in names if x != y and (x, y) != (names[-2], names[-1])]
    return [tuple(n for n in names if n not in pair) + pair for pair in pairs]
