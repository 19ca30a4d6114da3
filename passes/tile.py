"""``tile``: make the inner loops of nests that stay loops (not BLAS products) walk memory.

Three shapes: column reductions and transposes (tiles of the kernel's loop
jammed through the nest below it) and window reductions (the output row
moved inside a short reduction).

The bias gradient of a dense layer sums a matrix over its rows, one output
per column::

    parallel for c in 0..1023 {
      local acc = 0
      for a in 0..511 { acc += G[a, c] }
      db[c] = acc
    }

Each step of the reduction loop jumps a whole row (8 KiB), so every load
misses the cache line the previous one used, and nothing vectorises: 3.5 ms
for 512 x 1024.  ``interchange`` cannot help (the output loop is not part of
the reduction band) and ``reduce-in-place`` leaves a kernel's outermost loop
alone (it is the parallel one).  This pass strip-mines the output loop by a
tile of ``T`` columns and jams the ``T`` copies of its body through the
reduction band, so the reduction loop runs *outside* the tile::

    parallel for c_t in 0..63 {
      local acc_t0 = 0 ... local acc_t15 = 0
      for a in 0..511 {
        acc_t0 += G[a, 16*c_t] ... acc_t15 += G[a, 16*c_t + 15]
      }
      db[16*c_t] = acc_t0 ... db[16*c_t + 15] = acc_t15
    }
    kernel db_rest { for c in 16*(N // 16)..N - 1 { <original body> } }

Now one row step loads ``T`` neighbouring elements (whole cache lines, a
vector load after SLP vectorisation) into ``T`` scalar accumulators that stay
in registers.  The remainder (``N mod T`` columns, any ``N`` including
symbolic ones) is a second kernel, as ``unroll-jam`` makes; it is left out
when its range is provably empty.  The strip loop's stores ``db[16*c_t + u]``
pass the ``parallel`` pass's race test, so the tiles still run on all threads.

**Floating point.** Every accumulator still sums its own column over ``a``
sequentially, in the original order, with the same initial value and the
same epilogue: only *which columns are interleaved* changes, never the order
of one column's additions, so the results are bit-identical to the untiled
kernel (and to the reference interpreter whenever that one was).

**Cost model.** ``T`` = ``vectors`` times the doubles in one vector register
(``vector_bytes`` / 8; ``vector_bytes=0`` reads the host: 64 with AVX-512,
32 with AVX, 16 otherwise -- the element type is not known on L2, and a
float32 tile of the same ``T`` fills half as many registers).  Two vectors
per accumulator group keep two independent add chains in flight per row step
while the ``T`` accumulators of every group of the body (a fused kernel such
as layernorm's ``dg_db`` has two) stay within ``max_accumulators``; past it
``T`` is halved.  A tile's working set is ``T`` columns of one row per
load, a few cache lines: it always fits in L1, so no cache size enters.

**When.** A kernel that is one loop ``for c`` whose body is statements and
reduction bands (``tcc.ir.loop_analysis.reduction_band``: perfectly nested
loops accumulating into scalars) or element nests (below) whose bounds do
not mention ``c``, no other loop and no test; for every buffer the body
writes, one index position is ``k*c + (sizes)`` plus constants spanning
less than ``|k|`` in every access (iterations touch disjoint elements, so
their statements may be interleaved; ``parallel``'s rule);
and for every band the stride model (:func:`tcc.ir.loop_analysis.stride_cost`)
charges ``c`` less than the band's innermost loop variable -- ``c`` walks
memory, the reduction does not.  A constant trip count needs at least ``T``
iterations.  A row reduction (``mu[a] = sum[c](X[a, c])``)
fails the last test and is left to ``unroll-jam``, which runs after this
pass and counts a band's accumulators against its copy budget (so it does
not strip a tile's 16 accumulators again).

**Transposes.**  A nest without a reduction is tiled the same way:
``for j { for i { B[j, i] = A[i, j] } }`` loads ``A`` a row apart at every
step; with ``T`` rows of ``B`` jammed into the ``i`` loop each step loads
``T`` neighbouring elements of ``A`` (whole cache lines) and appends one
element to each of ``T`` rows of ``B`` (``T`` sequential write streams).
Such an *element nest* (perfectly nested loops whose innermost body only has
``let``s and stores) stands where a reduction band would, under the same
tests; the stores must be disjoint across ``j`` as above.  A 4096 x 4096
transpose went from 84 ms to 33 ms (2 threads, shared machine).

**Window reductions** (:func:`row_sweep`).  A stride-1 convolution's output
row ``for j { local acc = 0; for c, p, q { acc += x[.., j + q] * w[..] };
y[.., j] = acc }`` strides nowhere, but the band's innermost loop ``q`` runs
3 times, so nothing vectorises.  A kernel this pass does not tile has every
such inner output loop moved inside its reduction, the row accumulated in
the output buffer (``y[.., j] = 0``; ``for c, p, q { for j { y[.., j] +=
.. } }``; an epilogue as a third sweep), as ``reduce-in-place`` does when
``j`` is strictly cheaper in the stride model.  Cost model: it pays when the
band's innermost trip count is a constant below one vector
(``vector_bytes / 8``), the whole band runs at least :data:`MIN_SWEEP_BAND`
times or a symbolic count (a shorter one LLVM unrolls whole and vectorises
over ``j`` already: a box blur's 3 taps), and the output loop's trip count
is at least one vector (or symbolic); the row stays in L1 (a few KiB).
Each element adds the same terms in the same order; LLVM may contract
multiply-adds differently in the vector loop, so results agree to rounding,
not always bit for bit.

The GPU pipeline does not run this pass: there each ``c`` is a thread, and
neighbouring threads already read neighbouring elements of a row (coalesced);
tiles would give one thread ``T`` outputs and the grid ``T`` times fewer
threads.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tcc.ir.expr import Access, Const, Expr, FreshNames, fresh_name, postorder, transform
from tcc.ir.index import Affine
from tcc.ir.loop_analysis import (
    bound_inside,
    buffer_accesses,
    declared_scalars,
    fold_bounds,
    loads,
    owns,
    perfect_nest,
    reduction_band,
    stride_cost,
    strides_with,
    substitute_stmts,
)
from tcc.ir.loops import Accumulate, For, If, Kernel, Let, Local, LoopProgram, Stmt, Store
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)


def host_vector_bytes(cpuinfo: str = "/proc/cpuinfo") -> int:
    """The width of the host's widest vector registers in bytes: 64 (AVX-512), 32 (AVX), else 16 (SSE, NEON).

    Read from the CPU flags; 16 where they cannot be read (a safe tile: it
    only gets smaller, never wrong).
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            flags: set[str] = set()
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return 16
    if "avx512f" in flags:
        return 64
    if "avx" in flags:
        return 32
    return 16


def tile_width(vector_bytes: int, vectors: int, accumulators: int, max_accumulators: int) -> int:
    """The cost model: ``vectors`` registers of doubles per accumulator group, halved
    until the ``accumulators`` groups of the body fit ``max_accumulators``."""
    t = max(1, vector_bytes // 8) * max(1, vectors)
    while t > 1 and t * accumulators > max_accumulators:
        t //= 2
    return t


# ---------------------------------------------------------------------------
# Recognising a column reduction
# ---------------------------------------------------------------------------


def _pieces(body: tuple[Stmt, ...]) -> list[tuple[Stmt, ...] | list[For]] | None:
    """``body`` split into runs of plain statements and reduction bands, or None
    when it holds a loop that is not a band, or a test."""
    out: list[tuple[Stmt, ...] | list[For]] = []
    run: list[Stmt] = []
    for s in body:
        if isinstance(s, For):
            band = reduction_band(s) or _element_nest(s)
            if band is None:
                return None
            if run:
                out.append(tuple(run))
                run = []
            out.append(band)
        elif isinstance(s, (Let, Local, Store, Accumulate)):
            run.append(s)
        else:
            return None
    if run:
        out.append(tuple(run))
    return out


def _disjoint(loop: For, buffers: set[str], sizes: set[str]) -> bool:
    """Iterations of ``loop`` touch disjoint elements of every buffer its body writes,
    so statements of different iterations may be interleaved.

    The ``parallel`` pass's rule: some index position holds ``k*c + r`` (``r``
    of sizes) plus constants spanning less than ``|k|`` in every access to the
    buffer (``unroll-jam``'s strips write ``y[4*s]`` .. ``y[4*s + 3]``)."""
    accesses = buffer_accesses(loop.body, buffers)
    for name in {n for n, _, w in accesses if w}:
        tuples = [ix for n, ix, _ in accesses if n == name]
        if len({len(ix) for ix in tuples}) != 1 or not any(_separates(tuples, p, loop.var, sizes) for p in range(len(tuples[0]))):
            return False
    return True


def _separates(tuples: list[tuple[Affine, ...]], p: int, var: str, sizes: set[str]) -> bool:
    first = tuples[0][p]
    if not owns(first, var, sizes):
        return False
    offsets = []
    for ix in tuples:
        d = ix[p] - first
        if not d.is_constant:
            return False
        offsets.append(d.const)
    return max(offsets) - min(offsets) < abs(first.coeff(var))


def _element_nest(loop: For) -> list[For] | None:
    """The perfectly nested loops from ``loop`` down whose innermost body only binds
    ``let``s and stores (a transpose's ``for i { B[c, i] = A[i, c] }``), or None."""
    nest = perfect_nest(loop)
    inner = nest[-1].body
    if not inner or not all(isinstance(s, (Let, Store)) for s in inner):
        return None
    return nest


def _profitable(var: str, bands: list[list[For]], buffers: set[str]) -> bool:
    """Every band's loads stride through memory more than ``var`` does."""
    for band in bands:
        values = [s.value for s in band[-1].body if isinstance(s, (Let, Accumulate, Store))]
        inner = band[-1].var
        if not stride_cost(var, values, buffers) < stride_cost(inner, values, buffers):
            return False
    return True


# ---------------------------------------------------------------------------
# The pass
# ---------------------------------------------------------------------------


class _Tiler(FreshNames):
    def __init__(self, program: LoopProgram, vector_bytes: int, vectors: int, max_accumulators: int) -> None:
        self.buffers = {b.name for b in program.buffers}
        self.sizes = set(program.sizes)
        self.vector_bytes = vector_bytes
        self.vectors = vectors
        self.max_accumulators = max_accumulators
        self.taken: set[str] = set()

    def kernel(self, kernel: Kernel, kernel_names: set[str]) -> tuple[Kernel, ...]:
        """``kernel`` tiled (the strip kernel, then the remainder kernel unless it is empty), or as it was."""
        if kernel.extern is not None or len(kernel.body) != 1 or not isinstance(kernel.body[0], For):
            return (kernel,)
        loop = kernel.body[0]
        if len(loop.lo) != 1 or len(loop.hi) != 1:
            return (kernel,)
        pieces = _pieces(loop.body)
        if pieces is None:
            return (kernel,)
        bands = [p for p in pieces if isinstance(p, list)]
        if not bands or any(loop.var in b.names() for band in bands for l in band for b in l.lo + l.hi):
            return (kernel,)
        if not _disjoint(loop, self.buffers, self.sizes) or not _profitable(loop.var, bands, self.buffers):
            return (kernel,)
        accumulators = sum(1 for band in bands for s in band[-1].body if isinstance(s, Accumulate))
        t = tile_width(self.vector_bytes, self.vectors, accumulators, self.max_accumulators)
        lo, hi = loop.lo[0], loop.hi[0]
        if t < 2 or (lo.is_constant and hi.is_constant and hi.const - lo.const + 1 < t):
            return (kernel,)
        self.taken = self.buffers | self.sizes | bound_inside(kernel.body) | kernel_names
        strip, rest = self.strip_mine(loop, pieces, t)
        out = [Kernel(kernel.name, (strip,))]
        if not _empty(rest):
            out.append(Kernel(fresh_name(kernel.name + "_rest", kernel_names), (rest,)))
            kernel_names.add(out[-1].name)
        return tuple(out)

    def strip_mine(self, loop: For, pieces: list, t: int) -> tuple[For, For]:
        """The strip loop over full tiles of ``t`` jammed copies and the remainder loop.

        The remainder starts at ``max(lo, lo + t*strips)``: a symbolic trip count
        may be negative, and then there are no strips at all."""
        lo, hi = loop.lo[0], loop.hi[0]
        strip_var = self.fresh(loop.var + "_t")
        start = lo + Affine.var(strip_var, t)
        declared = declared_scalars(loop.body)
        renames = [{n: self.fresh(f"{n}_t{u}") for n in declared} for u in range(t)]
        values = [{loop.var: start + u} for u in range(t)]
        body: list[Stmt] = []
        for piece in pieces:
            if isinstance(piece, tuple):  # plain statements: every copy's, in copy order
                for u in range(t):
                    body.extend(substitute_stmts(piece, values[u], renames[u]))
                continue
            inner: tuple[Stmt, ...] = tuple(
                s for u in range(t) for s in substitute_stmts(piece[-1].body, values[u], renames[u])
            )
            for l in reversed(piece):
                inner = (replace(l, body=inner),)
            body.extend(inner)
        strips = (hi - lo + 1).floordiv(t)
        strip = For(strip_var, (Affine.constant(0),), (strips - 1,), tuple(body), parallel=loop.parallel)
        rest = replace(loop, lo=fold_bounds((lo, lo + strips * t), True))
        return strip, rest


# ---------------------------------------------------------------------------
# Window reductions: the output row innermost
# ---------------------------------------------------------------------------


# A band with fewer iterations in all is unrolled whole by LLVM, which then
# vectorises the output loop around it as it stands: the 3-tap box blur
# (examples/box_blur.tcc, 2048 x 2048) took 35 ms that way and 43 ms swept,
# while the 288-iteration band of a 32-channel 3x3 convolution went from
# 26.8 ms to 10.5 ms swept.
MIN_SWEEP_BAND = 32


def _product(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _trips(loop: For) -> int | None:
    """The constant trip count of ``loop``, or None when its bounds are symbolic."""
    if len(loop.lo) == 1 and len(loop.hi) == 1 and loop.lo[0].is_constant and loop.hi[0].is_constant:
        return max(0, loop.hi[0].const - loop.lo[0].const + 1)
    return None


def _walks_rows(var: str, values: list, buffers: set[str]) -> bool:
    """Some load in ``values`` has ``var`` in its last (contiguous) index."""
    return any(
        isinstance(n, Access) and n.tensor in buffers and n.indices and var in n.indices[-1].names()
        for v in values for n in postorder(v)
    )


def _window(band: list[For], var: str, lo: Affine, hi: Affine) -> tuple[list[For], list[Affine], list[Affine]] | None:
    """The band with ``var`` projected out of its bounds, and the bounds ``var`` gets inside it.

    A band loop ``z`` may have bounds ``±var + r`` (a transposed convolution's
    ``z in max(w - 31, 0)..min(w, 2)``) when it is the only one that does:
    each bound becomes a bound of ``var`` inside the band (``z >= w - 31``:
    ``w <= z + 31``), and ``z``'s own bound takes the extreme ``var`` of its
    range, ``lo..hi`` (``z >= lo - 31``).  ``z`` then runs over a superset of
    the values some ``var`` reaches and ``var`` over exactly its own, so the
    nest enumerates the same pairs.  None for any other dependence on ``var``.
    """
    users = [k for k, l in enumerate(band) if any(var in b.names() for b in l.lo + l.hi)]
    var_lo, var_hi = [lo], [hi]
    if not users:
        return band, var_lo, var_hi
    if len(users) > 1:
        return None
    l = band[users[0]]
    z = Affine.var(l.var)
    j = Affine.var(var)
    new_lo, new_hi = [], []
    for bounds, lower in ((l.lo, True), (l.hi, False)):
        for b in bounds:
            k = b.coeff(var)
            if k == 0 and var not in b.names():  # (a bound reading an index array at var depends on it)
                (new_lo if lower else new_hi).append(b)
                continue
            if abs(k) != 1 or not strides_with(b, var):
                return None
            # z >= b (lower) or z <= b (upper), b = k*var + r
            extreme = lo if (k > 0) == lower else hi
            (new_lo if lower else new_hi).append(b.substitute({var: extreme}))
            bound = z - b + j if k > 0 else b + j - z  # var's bound from the same inequality
            (var_hi if (k > 0) == lower else var_lo).append(bound)
    band = list(band)
    band[users[0]] = replace(l, lo=fold_bounds(tuple(new_lo), True), hi=fold_bounds(tuple(new_hi), False))
    return band, var_lo, var_hi


def _sweep_pays(loop: For, band: list[For], values: list, buffers: set[str], vector_elems: int, window: bool) -> bool:
    """The cost model of :func:`row_sweep`."""
    trips = _trips(loop)
    if (trips is not None and trips < vector_elems) or not _walks_rows(loop.var, values, buffers):
        return False
    mine, theirs = stride_cost(loop.var, values, buffers), stride_cost(band[-1].var, values, buffers)
    if window and mine < theirs:
        return True  # reduce-in-place's test, on a band it refuses (bounds on the output loop)
    short = _trips(band[-1])
    if short is None or short >= vector_elems or mine > theirs:
        return False
    whole = [_trips(l) for l in band]
    # a shorter band LLVM unrolls whole and vectorises over the output loop as it is
    return None in whole or _product(whole) >= MIN_SWEEP_BAND  # type: ignore[arg-type]


def row_sweep(loop: For, outer: list[str], buffers: set[str], vector_elems: int) -> tuple[Stmt, ...] | None:
    """A window reduction's innermost output loop moved inside the reduction, the row
    accumulated in its own buffer; None when ``loop`` does not have the shape or it would not pay.

    ``for j { local acc = 0; for c, p, q { acc += x[.., j + q] * w[..] }; y[.., j] = f(acc) }``
    becomes ``for j { y[.., j] = 0 }; for c, p, q { for j { y[.., j] += .. } }; for j { y[.., j] = f(y[.., j]) }``.
    Pays when ``j`` is contiguous wherever the band's innermost loop is (stride model) but the
    band's innermost loop is shorter than a vector (a 3-tap ``q``) and ``j`` is not, or, for
    a band whose bounds depend on ``j`` (:func:`_window`), when ``j`` is strictly more contiguous."""
    body = loop.body
    if len(body) < 3 or not isinstance(body[0], Local) or not isinstance(body[0].init, Const) or not isinstance(body[1], For):
        return None
    if len(loop.lo) != 1 or len(loop.hi) != 1:
        return None
    acc = body[0].name
    band = reduction_band(body[1])
    if band is None:
        return None
    inner = band[-1].body
    if not all(isinstance(s, Let) or (isinstance(s, Accumulate) and s.target == acc) for s in inner):
        return None
    tail = body[2:]
    store = tail[-1]
    own = tuple(Affine.var(v) for v in outer + [loop.var])
    if not isinstance(store, Store) or store.indices != own or not all(isinstance(s, Let) for s in tail[:-1]):
        return None
    values = [s.value for s in inner]  # type: ignore[union-attr]
    if store.buffer in {a.tensor for v in values for a in loads(v)} | {a.tensor for s in tail for a in loads(s.value) if a.indices}:
        return None
    if acc in {a.tensor for v in values for a in loads(v) if not a.indices}:
        return None  # the reduction reads its own partial sum: not a plain sum
    projected = _window(band, loop.var, loop.lo[0], loop.hi[0])
    if projected is None:
        return None
    new_band, var_lo, var_hi = projected
    if not _sweep_pays(loop, band, values, buffers, vector_elems, new_band != band):
        logger.debug("loop %s (accumulator %s): no row sweep: the stride model says it does not pay "
                     "(band %s)", loop.var, acc, ", ".join(l.var for l in band))
        return None
    element = Access(store.buffer, own)

    def read_acc(e: Expr) -> Expr:
        return transform(e, lambda n: element if isinstance(n, Access) and n.tensor == acc and not n.indices else n)

    sweep: tuple[Stmt, ...] = (replace(
        loop, lo=fold_bounds(tuple(var_lo), True), hi=fold_bounds(tuple(var_hi), False),
        body=tuple(Accumulate(store.buffer, own, s.value) if isinstance(s, Accumulate) else s for s in inner),
    ),)
    for l in reversed(new_band):
        sweep = (replace(l, body=sweep),)
    out: list[Stmt] = [replace(loop, body=(Store(store.buffer, own, body[0].init),)), sweep[0]]
    if len(tail) > 1 or read_acc(store.value) != element:  # anything but ``y[.., j] = acc``
        finish = tuple(Let(s.name, read_acc(s.value)) if isinstance(s, Let) else Store(store.buffer, own, read_acc(s.value)) for s in tail)  # type: ignore[union-attr]
        out.append(replace(loop, body=finish))
    return tuple(out)


def _sweep_rows(body: tuple[Stmt, ...], outer: list[str], buffers: set[str], vector_elems: int) -> tuple[Stmt, ...]:
    """:func:`row_sweep` applied to every loop below the kernel's outermost one (which stays the parallel one)."""
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, For):
            done = row_sweep(s, outer, buffers, vector_elems) if outer else None
            if done is not None:
                out.extend(done)
                continue
            s = replace(s, body=_sweep_rows(s.body, outer + [s.var], buffers, vector_elems))
        elif isinstance(s, If):
            s = replace(s, then=_sweep_rows(s.then, outer, buffers, vector_elems), orelse=_sweep_rows(s.orelse, outer, buffers, vector_elems))
        out.append(s)
    return tuple(out)


def _empty(loop: For) -> bool:
    """The loop's range is provably empty: some constant lower bound exceeds some constant upper bound."""
    los = [b.const for b in loop.lo if b.is_constant]
    his = [b.const for b in loop.hi if b.is_constant]
    return bool(los and his and max(los) > min(his))


def tile_program(program: LoopProgram, vector_bytes: int = 0, vectors: int = 2, max_accumulators: int = 32) -> LoopProgram:
    """``program`` with its column-reduction kernels tiled (module docstring)."""
    tiler = _Tiler(program, vector_bytes or host_vector_bytes(), vectors, max_accumulators)
    names = {k.name for k in program.kernels}
    kernels: list[Kernel] = []
    for k in program.kernels:
        tiled = tiler.kernel(k, names)
        if tiled[0] is k and k.extern is None:
            body = _sweep_rows(k.body, [], tiler.buffers, tiler.vector_bytes // 8)
            tiled = (k if body == k.body else Kernel(k.name, body),)
        kernels.extend(tiled)
    return program.with_kernels(tuple(kernels))


@dataclass(frozen=True)
class Tile(Pass):
    """Strip-mine a column reduction's output loop and jam the tile through the reduction."""

    name = "tile"
    level = Level.LOOPS
    summary = "column reductions: output tiles jammed through the reduction; window reductions: the output row innermost"

    # bytes of one vector register; 0: the host's (64 with AVX-512, 32 with AVX, else 16)
    vector_bytes: int = 0
    # vector registers of doubles per accumulator group: the tile is vectors * vector_bytes / 8 columns
    vectors: int = 2
    # scalar accumulators one tile may hold in all (every group of the body); past it the tile is halved
    max_accumulators: int = 32

    def __post_init__(self) -> None:
        self.check_ints("vector_bytes", zero=True)
        self.check_ints("vectors", "max_accumulators")

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return tile_program(program, self.vector_bytes, self.vectors, self.max_accumulators)
