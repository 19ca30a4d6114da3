"""``matvec-pair``: ``A u`` and ``A^T v`` in one pass over ``A``.

The value and gradient of a quadratic form ``f = x^T A x`` need ``A x`` (the
value, and half the gradient) and ``A^T x`` (the other half); so do a
bilinear form's gradients with respect to both vectors.  ``blas`` makes each
a matrix-vector product of BLAS (``extern matmul(A, f_rhs) -> f_mm``,
``extern matmul(transpose(A), f_rhs) -> dx_mm``), and each call streams the
whole of ``A`` from memory: two passes over 32 MB at n = 2000, where the
arithmetic (two multiply-adds per element) is far below what the memory
delivers.  One pass can do both: while row ``r`` of ``A`` is in cache, its
dot product with ``u`` is ``y[r]`` and ``v[r]`` times it is added to a
partial ``A^T v``::

    kernel f_mm { extern matmul(A, u) -> y }                kernel f_mm {
    ...                                                       for p in 0..P-1 {           # parallel (parts own their rows)
    kernel dx_mm { extern matmul(transpose(A), v) -> z }        for c { z_part[p, c] = 0 }
                                                                for t {                   # 4 rows 4*(P*t + p) + k at once
                                                                  local y0 = 0 ... y3 = 0
                                                                  let w0 = v[r0, 0] ... w3 = v[r3, 0]
                                                     ==>          for c {
                                                                    y0 += A[r0, c] * u[c, 0] ... y3 += ...
                                                                    z_part[p, c] += A[r0, c] * w0 + ... + A[r3, c] * w3
                                                                  }
                                                                  y[r0, 0] = y0 ... y[r3, 0] = y3
                                                                }
                                                              }
                                                            }
                                                            kernel f_mm_rest { the rows % 4 left, into part 0 }
                                                            kernel dx_mm { z = sum[q] z_part[q, :] }

Four rows at a time share the loads of ``u[c]`` and of the partial row:
per four elements of ``A``, one load of ``u``, a load and a store of
``z_part`` and eight multiply-adds, all unit-stride, which LLVM
vectorises.  Rows are dealt to the ``P`` parts as ``privatize`` deals them
(``4*(P*t + p) + k``: one to one in ``p``, the ``parallel`` pass's residue
rule), each part adds into its own partial row, and a last kernel adds the
``P`` rows.  ``P`` (option ``parts``, default 8) does not depend on the
thread count: every thread count gives the same bits.  The sums are
reassociated, as BLAS's are (``y`` in ``c`` order with LLVM's reassociation
of reductions, ``z`` as ``P`` partial sums).

**Matched.** Two kernels ``extern matmul(A, u) -> y`` and ``extern
matmul(transpose(A), v) -> z`` (either first) of one two-dimensional ``A``,
``u``, ``v``, ``y``, ``z`` of one column.  The pair
runs where the earlier one ran; the kernels between that the later one
needs (those writing what it reads or reading what it writes, and what
they need in turn: the bilinear form's copy of its second vector) move
ahead of it, the others stay after it.  Where one of those needs the
earlier product's result, no point in the program can run both, and the
two calls stay.  The ``JAM - 1`` rows at most that the groups of four leave
are done one at a time in a kernel ``<y>_rest`` (into part 0) before the
combine.  A constant column count must keep a partial row within
``max-row-bytes`` (default 65536); symbolic extents are fine (the groups
are ``rows // 4``, the leftover rows a loop).
The pass runs in the CPU pipeline after ``unroll-jam`` (whose strip-mining
would not recognise the rows) and before ``fuse`` and ``parallel``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tcc.ir.expr import Access, Binary, Const, Expr, FreshNames
from tcc.ir.index import Affine
from tcc.ir.loop_analysis import all_writes, program_names, read_names
from tcc.ir.loops import Accumulate, Buffer, For, Kernel, Let, Local, LoopProgram, Stmt, Store
from tcc.passes.pass_base import Level, Pass, PassContext

#: at DEBUG, a pair of matrix-vector products left as two BLAS calls, and why (docs/logging.md)
logger = logging.getLogger(__name__)

#: rows of ``A`` handled together: one load of ``u[c]`` and of the partial row serves this many
JAM = 4


@dataclass(frozen=True)
class _Product:
    """``extern matmul(A, x) -> out`` (``transposed``: ``A`` read transposed) in kernel ``index``."""

    index: int
    matrix: str
    vector: str
    out: str
    transposed: bool


class _Pairing(FreshNames):
    def __init__(self, program: LoopProgram, parts: int, max_row_bytes: int) -> None:
        self.program = program
        self.parts = parts
        self.max_row_bytes = max_row_bytes
        self.shapes = {b.name: b.shape for b in program.buffers}
        self.buffers = set(self.shapes)
        self.taken = program_names(program)
        self.touched: dict[int, tuple[set[str], set[str]]] = {}  # by kernel index: what touches() found
        self._ancestors: list[int] | None = None

    def product(self, index: int, kernel: Kernel) -> _Product | None:
        ext = kernel.extern
        if ext is None or ext.fn != "matmul" or ext.spec or len(ext.args) != 2:
            return None
        flags = ext.transposed or (False, False)
        if flags[1]:
            return None
        a, x = ext.args
        sa, sx, so = (self.shapes.get(n) for n in (a, x, ext.out))
        if sa is None or sx is None or so is None or len(sa) != 2 or len(sx) != 2 or len(so) != 2:
            return None
        rows, cols = sa[::-1] if flags[0] else sa
        one = Affine.constant(1)
        if sx != (cols, one) or so != (rows, one) or x == ext.out or a in (x, ext.out):
            return None
        return _Product(index, a, x, ext.out, flags[0])

    def touches(self, index: int) -> tuple[set[str], set[str]]:
        """The buffers kernel ``index`` reads and those it writes (each kernel walked once)."""
        hit = self.touched.get(index)
        if hit is None:
            k = self.program.kernels[index]
            hit = ((set(k.extern.args), {k.extern.out}) if k.extern is not None
                   else (read_names(k.body) & self.buffers, set(all_writes(k.body))))
            self.touched[index] = hit
        return hit

    def ancestors(self) -> list[int]:
        """For each kernel, the bit set of the earlier kernels it must run after, transitively.

        Kernel ``b`` runs after ``a`` when one writes what the other reads or
        writes.  For the closure it is enough to follow, per buffer, its last
        writer (``b`` reads or writes the buffer) and the readers since that
        write (``b`` writes it): every other conflict is implied through them.
        One walk over the kernels, so the pass is near-linear in the program
        (pairwise tests over every pair and every kernel between made the
        gradient of a 60-step matrix-vector chain take 15 s here).
        """
        if self._ancestors is None:
            last_writer: dict[str, int] = {}
            readers: dict[str, list[int]] = {}
            anc: list[int] = []
            for b in range(len(self.program.kernels)):
                reads, writes = self.touches(b)
                preds = {last_writer[n] for n in reads | writes if n in last_writer}
                preds.update(r for n in writes for r in readers.get(n, ()))
                mask = 0
                for a in preds:
                    mask |= (1 << a) | anc[a]
                anc.append(mask)
                for n in reads:
                    readers.setdefault(n, []).append(b)
                for n in writes:
                    last_writer[n] = b
                    readers[n] = []
            self._ancestors = anc
        return self._ancestors

    def schedule(self, first: _Product, second: _Product) -> list[int] | None:
        """The kernels between the two products that must run before the pair (those ``second``
        depends on, transitively), or ``None`` where ``second`` depends on ``first``, directly or
        through a kernel between: then no point runs both."""
        anc = self.ancestors()[second.index]
        if anc >> first.index & 1:
            return None
        between = anc >> (first.index + 1) & ((1 << (second.index - first.index - 1)) - 1)
        return [first.index + 1 + k for k in range(between.bit_length()) if between >> k & 1]

    def pairs(self) -> list[tuple[_Product, _Product, list[int]]]:
        found = [p for i, k in enumerate(self.program.kernels) if (p := self.product(i, k)) is not None]
        used = 0  # bit set of the kernels inside a chosen pair's span
        out = []
        for n, first in enumerate(found):
            for second in found[n + 1:]:
                span = ((1 << (second.index + 1)) - 1) ^ ((1 << first.index) - 1)
                if second.matrix != first.matrix or second.transposed == first.transposed or used & span:
                    continue  # pairs never interleave: each reorders only the kernels inside its own span
                cols = self.shapes[first.matrix][1]
                if cols.is_constant and 8 * cols.const > self.max_row_bytes:
                    logger.debug("%s and %s: a partial row of %d columns exceeds max-row-bytes %d",
                                 first.out, second.out, cols.const, self.max_row_bytes)
                    continue
                before = self.schedule(first, second)
                if before is None:
                    logger.debug("%s and %s: no point runs both (%s needs what needs %s)",
                                 first.out, second.out, second.out, first.out)
                    continue
                used |= span
                out.append((first, second, before))
        return out

    # -- building ------------------------------------------------------------------
    def fused(self, gemv: _Product, gemv_t: _Product) -> tuple[list[Kernel], Buffer]:
        """The one-pass kernel (named as the earlier product's), the rows it leaves (``_rest``) and the
        combine kernel (named as the later product's), and the partial rows' buffer."""
        rows, cols = self.shapes[gemv.matrix]
        P = self.parts
        part = self.fresh(gemv_t.out + "_part")
        p, t, c, q, r = (self.fresh(n) for n in ("p", "t", "c", "q", "r"))
        pv, cv = Affine.var(p), Affine.var(c)
        zero = Affine.constant(0)
        A, u, v, y = gemv.matrix, gemv.vector, gemv_t.vector, gemv.out

        def rows_body(at: list[Affine], into: Affine) -> tuple[Stmt, ...]:
            accs = [self.fresh(f"{y}_acc") for _ in at]
            ws = [self.fresh(f"{v}_w") for _ in at]
            dots: list[Stmt] = [Accumulate(s, (), Binary("*", Access(A, (row, cv)), Access(u, (cv, zero))))
                                for s, row in zip(accs, at)]
            terms: Expr | None = None
            for w, row in zip(ws, at):
                term = Binary("*", Access(A, (row, cv)), Access(w, ()))
                terms = term if terms is None else Binary("+", terms, term)
            assert terms is not None
            inner = For(c, (zero,), (cols - 1,), tuple(dots) + (Accumulate(part, (into, cv), terms),))
            return (tuple(Local(s, Const(0)) for s in accs)
                    + tuple(Let(w, Access(v, (row, zero))) for w, row in zip(ws, at))
                    + (inner,) + tuple(Store(y, (row, zero), Access(s, ())) for s, row in zip(accs, at)))

        groups = rows.floordiv(JAM)  # group g = P*t + p: rows JAM*g .. JAM*g + JAM - 1, dealt round-robin to the parts
        base = (Affine.var(t) * P + pv) * JAM
        jammed = For(t, (zero,), ((groups - 1 - pv).floordiv(P),), rows_body([base + k for k in range(JAM)], pv))
        zeros = For(c, (zero,), (cols - 1,), (Store(part, (pv, cv), Const(0)),))
        kernel = Kernel(self.program.kernels[min(gemv.index, gemv_t.index)].name,
                        (For(p, (zero,), (Affine.constant(P - 1),), (zeros, jammed)),))
        # the rows % JAM left: one at a time, into part 0, in a kernel of their own after the parts
        kernels = [kernel]
        if not (rows.is_constant and rows.const % JAM == 0):
            rest = For(r, (groups * JAM,), (rows - 1,), rows_body([Affine.var(r)], zero))
            kernels.append(Kernel(self.fresh(kernel.name + "_rest"), (rest,)))
        z = gemv_t.out
        fill = For(c, (zero,), (cols - 1,), (Store(z, (cv, zero), Const(0)),))
        add = For(q, (zero,), (Affine.constant(P - 1),),
                  (For(c, (zero,), (cols - 1,), (Accumulate(z, (cv, zero), Access(part, (Affine.var(q), cv))),)),))
        combine = Kernel(self.program.kernels[max(gemv.index, gemv_t.index)].name, (fill, add))
        return kernels + [combine], Buffer(part, (Affine.constant(P), cols), "temp")

    def run(self) -> LoopProgram:
        pairs = self.pairs()
        if not pairs:
            return self.program
        kernels = list(self.program.kernels)
        temps = []
        moved: dict[int, list[Kernel]] = {}
        for first, second, before in pairs:
            gemv, gemv_t = (second, first) if first.transposed else (first, second)
            made, temp = self.fused(gemv, gemv_t)
            moved[first.index] = [self.program.kernels[k] for k in before] + made  # what the pair needs first
            for k in (second.index, *before):
                kernels[k] = None  # type: ignore[call-overload]
            temps.append(temp)
            logger.debug("kernels %s and %s: one pass over %s, %d parts", made[0].name, made[-1].name,
                         gemv.matrix, self.parts)
        out: list[Kernel] = []
        for i, k in enumerate(kernels):
            if i in moved:
                out.extend(moved[i])
            elif k is not None:
                out.append(k)
        return replace(self.program, buffers=self.program.buffers + tuple(temps), kernels=tuple(out))


def matvec_pair(program: LoopProgram, parts: int = 8, max_row_bytes: int = 1 << 16) -> LoopProgram:
    return _Pairing(program, parts, max_row_bytes).run()


@dataclass(frozen=True)
class MatvecPair(Pass):
    """``A u`` and ``A^T v`` (two BLAS matrix-vector products of one matrix) in one pass over ``A``."""

    name = "matvec-pair"
    level = Level.LOOPS
    summary = "two matrix-vector products of one matrix, one transposed (matmul(A, u), matmul(transpose(A), v)), in one pass over it"

    # partial rows of A^T v (one per part; the parts run in parallel)
    parts: int = 8
    # a partial row must fit in this many bytes (float64)
    max_row_bytes: int = 1 << 16

    def __post_init__(self) -> None:
        self.check_ints("parts", "max_row_bytes")

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return matvec_pair(program, self.parts, self.max_row_bytes)
