"""``privatize``: column reductions become per-part partial rows, accumulated where their rows are made.

A backward pass sums matrices over their rows: a bias gradient
``db[c] = sum[a](dZ[a, c])``, layer normalisation's
``dg[c] = sum[a](dY[a, c] * xc[a, c] * r[a])``.  After ``tile`` such a
kernel walks ``T`` columns at a time down the rows -- one cache line per
row step, 8 KiB apart -- and it reads ``dY`` and ``X`` again, after the row
kernel that computed ``mu`` and ``r`` has just streamed through them.  In
layer normalisation's gradient (512 x 1024, 2 threads) that second pass
was 1.1 ms of a 1.7 ms program.

This pass privatises the reduction (OpenMP's ``reduction`` clause, TVM's
``rfactor`` over the rows): the rows are dealt to ``P`` parts, each part
adds its rows into its own partial row, a unit-stride loop over the
columns, and a second kernel adds the ``P`` partial rows::

    kernel dg {                           kernel <host> {
      for c in 0..C-1 {                     for p in 0..P-1 {           # parallel: parts write their own row
        local acc = 0                         for c { dg_part[p, c] = 0 }
        for a in 0..A-1 {          ==>        for t in 0..(A-1-p) // P {
          acc += E(a, c)                        <the host's row body at a = P*t + p>
        }                                       for c { dg_part[p, c] += E(P*t + p, c) }
        dg[c] = acc                           }
      }                                     }
    }                                     }
                                          kernel dg {
                                            for c { local acc = 0; for q in 0..P-1 { acc += dg_part[q, c] }; dg[c] = acc }
                                          }

**The host.**  Where the nearest earlier kernel that writes something
``E`` reads is a row kernel ``for a in <the same rows> { ... }`` that
writes each such buffer at row ``a`` only (``mu[a]``, ``r[a]``, the
``dX_lhs[a, c]`` of a dense layer's epilogue) and whose loop is race-free,
the partial rows are accumulated inside it, at the end of each row's
iteration: the row kernel has just read or written that row, so ``E``'s
loads hit the cache, and the reduction's own pass over the matrix is gone.
The row kernel's loop becomes the part loop; its iterations still touch
disjoint rows (``P*t + p`` is one to one in ``p`` for ``0 <= p < P``: the
``parallel`` pass's residue rule).  Otherwise the partial rows get a kernel
of their own (reading only inputs, say), which still reads each row once,
contiguously; column reductions over the same rows with nothing written
between share one such kernel, one pass over the rows.  Kernels between the
host and the reduction must not write what ``E`` reads: the reduction moves
before them.

**Floating point.**  Each column is summed as ``P`` partial sums (rows
``p, p + P, ...`` in order), then their sum in part order: reassociated, as
any parallel reduction is, so the last bits differ from the sequential sum.
``P`` is fixed when compiling, never the thread count, so every call and
every thread count gives the same bits.  Infinities and NaN propagate as in
the sequential sum (a column with ``+inf`` and ``-inf`` gives NaN either
way); an empty row range gives zeros.

**Cost model.**  The row count must be a constant (a symbolic one may be
small, and then ``P`` mostly empty partial rows of a possibly long row
would cost more than the sum): ``P`` is the largest power of two with at
least ``min_rows`` rows per part, at most ``max_parts``, and at least 2.
The reduction must be a column reduction by the stride model
(:func:`tcc.ir.loop_analysis.stride_cost`: the column variable walks memory,
the row variable does not), and a constant column count must keep one
part's partial rows within ``max_row_bytes`` (in L2 while its rows stream
through).  The combine kernel is a short column reduction ``tile`` then
handles.  The GPU pipeline does not run this pass (``split-reduction``
does its job there).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from tcc.ir.expr import Access, Const, FreshNames
from tcc.ir.index import Affine
from tcc.ir.loop_analysis import (
    all_writes,
    buffer_accesses,
    constant_trips,
    declared_scalars,
    program_names,
    read_names,
    stride_cost,
    substitute_stmts,
)
from tcc.ir.loops import Accumulate, Buffer, For, Kernel, Let, Local, LoopProgram, Stmt, Store
from tcc.passes.parallel import race_free
from tcc.passes.pass_base import Level, Pass, PassContext

#: at DEBUG, a column reduction left as it is, and why (docs/logging.md)
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Column:
    """``for c { local acc = 0; for a { lets; acc += E }; epilogue }``: one column reduction kernel."""

    index: int          # its position in the program's kernels
    kernel: Kernel
    cols: For
    acc: Local
    rows: For
    epilogue: tuple[Stmt, ...]
    reads: frozenset[str]  # the buffers the reduction's body reads


@dataclass
class _Host:
    """Where partial rows are accumulated: an existing row kernel, or a new kernel placed at ``index``."""

    index: int
    rows: For
    parts: int
    row_kernel: Kernel | None = None
    groups: list[_Column] = field(default_factory=list)


class _Privatizer(FreshNames):
    def __init__(self, program: LoopProgram, min_rows: int, max_parts: int, max_row_bytes: int) -> None:
        self.program = program
        self.buffers = {b.name for b in program.buffers}
        self.sizes = set(program.sizes)
        self.min_rows = min_rows
        self.max_parts = max_parts
        self.max_row_bytes = max_row_bytes
        self.taken = program_names(program)

    # -- recognising ---------------------------------------------------------------
    def column(self, index: int, kernel: Kernel) -> _Column | None:
        if kernel.extern is not None or len(kernel.body) != 1 or not isinstance(kernel.body[0], For):
            return None
        cols = kernel.body[0]
        body = cols.body
        if cols.parallel or len(cols.lo) != 1 or len(cols.hi) != 1 or len(body) < 2:
            return None
        acc, rows, epilogue = body[0], body[1], body[2:]
        if not (isinstance(acc, Local) and isinstance(acc.init, Const) and acc.init.value == 0):
            return None
        if not isinstance(rows, For) or rows.parallel or constant_trips(rows) is None:
            return None
        if cols.var in {n for b in rows.lo + rows.hi for n in b.names()}:
            return None
        adds = [s for s in rows.body if isinstance(s, Accumulate)]
        if (len(adds) != 1 or adds[0].target != acc.name or adds[0].indices
                or not all(isinstance(s, (Let, Accumulate)) for s in rows.body)
                or acc.name in read_names(rows.body)):
            return None
        if not all(isinstance(s, (Let, Store)) for s in epilogue):
            return None
        reads = frozenset(read_names(rows.body) & self.buffers)
        if reads & all_writes(epilogue):
            return None  # the reduction reads what its own epilogue writes: it cannot run first
        values = [s.value for s in rows.body if isinstance(s, (Let, Accumulate))]
        if not stride_cost(cols.var, values, self.buffers) < stride_cost(rows.var, values, self.buffers):
            return None  # not a column reduction: the row variable walks memory
        width = constant_trips(cols)
        if width is not None and (width == 0 or 8 * width > self.max_row_bytes):
            return None
        return _Column(index, kernel, cols, acc, rows, epilogue, reads)

    def parts(self, rows: For) -> int:
        n = constant_trips(rows) or 0
        p = 1
        while p * 2 <= self.max_parts and n // (p * 2) >= self.min_rows:
            p *= 2
        return p

    def producer(self, kernel: Kernel, col: _Column) -> bool:
        """Whether ``kernel`` (which writes some of what ``col`` reads) can host ``col``'s partial rows."""
        if kernel.extern is not None or len(kernel.body) != 1 or not isinstance(kernel.body[0], For):
            return False
        loop = kernel.body[0]
        if len(loop.lo) != 1 or len(loop.hi) != 1 or (loop.lo, loop.hi) != (col.rows.lo, col.rows.hi):
            return False
        if not race_free(loop, self.buffers, self.sizes):
            return False
        own = buffer_accesses(loop.body, self.buffers)
        theirs = buffer_accesses(col.rows.body, self.buffers)
        for name in {n for n, _, w in own if w} & col.reads:
            mine = [ix for n, ix, _ in own if n == name]
            read = [ix for n, ix, _ in theirs if n == name]
            if not any(all(len(ix) > k and ix[k] == Affine.var(loop.var) for ix in mine)
                       and all(len(ix) > k and ix[k] == Affine.var(col.rows.var) for ix in read)
                       for k in range(len(mine[0]))):
                return False  # its row a is not the only row of `name` it touches
        return True

    # -- placing ------------------------------------------------------------------
    def host_for(self, col: _Column, kernels: tuple[Kernel, ...], hosts: dict[int, _Host],
                 grouped: set[int]) -> _Host | None:
        """Where ``col``'s partial rows go; ``grouped``: kernels already privatised (never hosts: their
        own reduction moved out, so hosting there would compute it twice)."""
        parts = self.parts(col.rows)
        if parts < 2:
            logger.debug("kernel %s: fewer than %d rows per part for 2 parts", col.kernel.name, self.min_rows)
            return None
        for j in range(col.index - 1, -1, -1):
            k = kernels[j]
            writes = all_writes(k.body) if k.extern is None else {k.extern.out}
            if writes & col.reads:
                # a host (new or taken) must pass the producer test for every reduction it takes: one that
                # reads the host's rows elsewhere (mu[63 - a]) would read rows not yet computed
                if (j not in grouped and (j not in hosts or hosts[j].row_kernel is not None)
                        and self.producer(k, col)):  # the producer's bounds are col's rows
                    return hosts.setdefault(j, _Host(j, k.body[0], parts, row_kernel=k))
                break  # no host before this writer: a kernel of its own
            host = hosts.get(j)
            if host is not None and (host.rows.lo, host.rows.hi) == (col.rows.lo, col.rows.hi):
                return host
        hosts[col.index] = _Host(col.index, col.rows, parts)
        return hosts[col.index]

    # -- rewriting ----------------------------------------------------------------
    def host_kernel(self, host: _Host, names: dict[int, str]) -> tuple[Kernel, list[Buffer]]:
        P = host.parts
        column_var: dict[tuple[Affine, Affine], str] = {}  # one column loop per bounds
        p, t = self.fresh("p"), self.fresh("t")
        pv = Affine.var(p)
        lo, hi = host.rows.lo[0], host.rows.hi[0]
        row = lo + Affine.var(t) * P + pv  # part p takes rows lo + p, lo + p + P, ...
        zeros: dict[tuple[Affine, Affine], list[Stmt]] = {}  # by column bounds: equal bounds share one loop
        adds: dict[tuple[Affine, Affine], list[Stmt]] = {}
        temps: list[Buffer] = []
        for col in host.groups:
            part = names[col.index]
            clo, chi = col.cols.lo[0], col.cols.hi[0]
            if (clo, chi) not in column_var:
                column_var[(clo, chi)] = self.fresh(col.cols.var)
            c = column_var[(clo, chi)]
            at = (pv, Affine.var(c) - clo)
            temps.append(Buffer(part, (Affine.constant(P), chi - clo + 1), "temp"))
            zeros.setdefault((clo, chi), []).append(Store(part, at, Const(0)))
            lets = {n: self.fresh(n) for n in declared_scalars(col.rows.body)}
            body = substitute_stmts(col.rows.body, {col.rows.var: row, col.cols.var: Affine.var(c)}, lets)
            adds.setdefault((clo, chi), []).extend(
                Accumulate(part, at, s.value) if isinstance(s, Accumulate) else s for s in body)
        zero_loops = tuple(For(column_var[b], (b[0],), (b[1],), tuple(v)) for b, v in zeros.items())
        add_loops = tuple(For(column_var[b], (b[0],), (b[1],), tuple(v)) for b, v in adds.items())
        own: tuple[Stmt, ...] = ()
        if host.row_kernel is not None:
            loop = host.row_kernel.body[0]
            own = substitute_stmts(loop.body, {loop.var: row})
        rows = For(t, (Affine.constant(0),), ((hi - lo - pv).floordiv(P),), own + add_loops)
        outer = For(p, (Affine.constant(0),), (Affine.constant(P - 1),), zero_loops + (rows,))
        name = host.row_kernel.name if host.row_kernel is not None else self.fresh("_".join(c.kernel.name for c in host.groups) + "_rows")
        return Kernel(name, (outer,)), temps

    def combine(self, col: _Column, part: str, parts: int) -> Kernel:
        q = self.fresh("q")
        clo = col.cols.lo[0]
        add = For(q, (Affine.constant(0),), (Affine.constant(parts - 1),),
                  (Accumulate(col.acc.name, (), Access(part, (Affine.var(q), Affine.var(col.cols.var) - clo))),))
        return Kernel(col.kernel.name, (replace(col.cols, body=(col.acc, add) + col.epilogue),))

    def run(self) -> LoopProgram:
        kernels = self.program.kernels
        hosts: dict[int, _Host] = {}
        combines: dict[int, tuple[_Column, _Host]] = {}
        for i, k in enumerate(kernels):
            col = self.column(i, k)
            if col is None:
                continue
            host = self.host_for(col, kernels, hosts, set(combines))
            if host is None:
                continue
            host.groups.append(col)
            combines[i] = (col, host)
        hosts = {i: h for i, h in hosts.items() if h.groups}
        if not hosts:
            return self.program
        names = {col.index: self.fresh(col.kernel.name + "_part") for col, _ in combines.values()}
        out: list[Kernel] = []
        temps: list[Buffer] = []
        for i, k in enumerate(kernels):
            if i in hosts:
                kernel, made = self.host_kernel(hosts[i], names)
                out.append(kernel)
                temps.extend(made)
                logger.debug("kernel %s: partial rows of %s, %d parts", kernel.name,
                             ", ".join(c.kernel.name for c in hosts[i].groups), hosts[i].parts)
                if hosts[i].row_kernel is not None:
                    continue
            if i in combines:
                col, host = combines[i]
                out.append(self.combine(col, names[i], host.parts))
            elif i not in hosts:
                out.append(k)
        return replace(self.program, buffers=self.program.buffers + tuple(temps), kernels=tuple(out))


def privatize(program: LoopProgram, min_rows: int = 8, max_parts: int = 32, max_row_bytes: int = 1 << 16) -> LoopProgram:
    return _Privatizer(program, min_rows, max_parts, max_row_bytes).run()


@dataclass(frozen=True)
class Privatize(Pass):
    """Column reductions as per-part partial rows, accumulated in the kernel that makes their rows."""

    name = "privatize"
    level = Level.LOOPS
    summary = "column reductions become per-part partial rows (unit stride), accumulated in the row kernel that makes their rows"

    # at least this many rows per part
    min_rows: int = 8
    # at most this many parts (partial rows per column reduction)
    max_parts: int = 32
    # a constant column count must keep one partial row within this many bytes (float64)
    max_row_bytes: int = 1 << 16

    def __post_init__(self) -> None:
        self.check_ints("min_rows", "max_parts", "max_row_bytes")

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return privatize(program, self.min_rows, self.max_parts, self.max_row_bytes)
