"""``fuse-rows``: a chain of row-wise kernels becomes one parallel loop over the rows.

Layer normalisation is four definitions over the rows ``a`` of ``X``: the row
mean ``mu[a]``, the centred row ``xc[a, :]``, the reciprocal deviation
``r[a]`` and the result ``Y[a, :]``.  ``lower-loops`` gives each its own
kernel, each a ``parallel for a``, so a row makes four round trips through
memory and the runtime launches four parallel kernels (each launch costs tens
of microseconds of dispatch).  Every later kernel reads only row ``a`` of what
the earlier ones wrote, so the four can run per row, one after the other,
inside one loop::

    kernel mu { parallel for a { mu[a] = sum_c X[a, c] / C } }
    kernel xc { parallel for a { for c { xc[a, c] = X[a, c] - mu[a] } } }
    ...
      ==>
    kernel mu_xc_r_Y {
      parallel for a {
        local mu_acc = 0; for c { mu_acc += X[a, c] }; let mu_v = mu_acc / C; mu[a] = mu_v
        for c { xc[a, c] = X[a, c] - mu_v }
        ...                               # r, then Y, reading row a while it is in cache
      }
    }

Legality is ``fuse``'s (:mod:`tcc.passes.fuse`): two consecutive kernels
fuse over their common outer loops (same ranges after renaming) when every
access, in either kernel, to a buffer one writes and the other reads or
writes is at the same index, owned one to one by the fused iteration; so a
later kernel reading another row (``mu[a + 1]``), a transposed read
(``xc[c, a]``) or a column reduction (``sum[a](xc[a, c])``) keeps the kernels
apart.  As in ``fuse``, the deepest fusion that passes is taken (element-wise
neighbours fuse over all their loops), a value stored and re-read at the same
index is forwarded through a ``let``, and a chain grows pairwise: the fused
kernel is tried with the next one.

What ``fuse-rows`` adds is *which* pairs, and *when*:

* **Only chains.**  The second kernel must read a buffer the first writes:
  then fusion keeps the intermediate row in cache, which is the point.
  Independent neighbours (``dg`` and ``db`` of the layernorm gradient, which
  only share inputs) are left to ``fuse``, later.
* **Only when the result still runs in parallel** (the test of
  :func:`tcc.passes.parallel.race_free` on the fused loop), so fusing never
  turns a parallel kernel into a sequential one.
* **Before ``unroll-jam``.**  ``unroll-jam`` strip-mines a row reduction by 4
  (``for a_s { 4 accumulators }`` plus a ``_rest`` kernel), after which no
  two kernels of the chain have equal outer loops, and ``fuse`` (after it)
  finds nothing.  Handling ``a_s`` loops after the fact would mean
  strip-mining the element-wise kernels the same way (and their remainders),
  for a gain the strip does not give here: its 4 accumulators pay when the
  rows share loads (``x[c]`` of a matrix-vector product), and a chain's
  reductions read the row itself.  So chains fuse first; a fused kernel no
  longer has the one-band shape ``unroll-jam`` strip-mines, and every kernel
  left unfused (no chain, or an illegal one) is strip-mined as before.

Locals of the chain (``mu``, ``xc``, ``r``) keep their whole buffers: by
default the runtime returns every local (``tcc run`` prints them), so they
cannot shrink to one row.  With ``tcc.compile(..., results=...)`` the cheap
ones never get here: ``rematerialize`` recomputes them where they are read.  ``temp`` buffers the chain only reads at the row it stored are
forwarded and then dropped by ``reuse-buffers``.

**Repeated reductions.**  Once the chain shares the row loop, a reduction
that the body computes a second time -- ``local acc2 = 0; for v { acc2 +=
E }`` with the same range and ``E`` as an earlier one, and nothing written
between to what ``E`` reads or to the first accumulator -- becomes ``let
acc2 = acc1`` (:func:`share_reductions`).  The chain rule writes such
repeats: layer normalisation's gradient defines ``dxc_t = sqrt(sum[c](xc[a,
c]**2) / C + eps)`` beside ``r = 1 / sqrt(<the same>)``, which made one of
the row body's passes over the row a second sum of squares.

Not in the GPU pipeline: there a kernel gets one thread per element of its
perfectly nested parallel loops (``parallel{depth=8}``), and a fused row
kernel would run ``xc`` and ``Y`` with one thread per row, 1024 elements
each, instead of one per element.  The GPU keeps ``fuse{full=true}``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Sequence

from tcc.ir.expr import Access, Const, Expr, postorder
from tcc.ir.index import Affine
from tcc.ir.loop_analysis import all_writes, buffer_accesses, substitute_stmts
from tcc.ir.loops import Accumulate, For, Kernel, Let, Local, LoopProgram, Stmt
from tcc.passes.fuse import Fuser
from tcc.passes.parallel import race_free
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)


def _one_loop(kernel: Kernel) -> For | None:
    """The kernel's loop when its body is exactly one ``for`` (never an external kernel)."""
    body = kernel.body
    return body[0] if len(body) == 1 and isinstance(body[0], For) else None


def _chained(k1: Kernel, k2: Kernel, buffers: set[str]) -> bool:
    """Whether ``k2`` reads a buffer that ``k1`` writes: fused, the row stays in cache."""
    written = {n for n, _, w in buffer_accesses(k1.body, buffers) if w}
    return any(n in written for n, _, w in buffer_accesses(k2.body, buffers) if not w)


def _fuse_pair(fuser: Fuser, k1: Kernel, k2: Kernel, buffers: set[str], sizes: set[str]) -> Kernel | None:
    """``k1`` and ``k2`` as one kernel, if they are a chain, ``fuse`` allows it and the loop stays parallel."""
    if _one_loop(k1) is None or _one_loop(k2) is None or not _chained(k1, k2, buffers):
        return None
    fused = fuser.fuse(k1, k2)
    loop = _one_loop(fused) if fused is not None else None
    return fused if loop is not None and race_free(loop, buffers, sizes) else None


def _reduction(block: Sequence[Stmt | None], i: int) -> tuple[str, For, Expr] | None:
    """``(acc, loop, E)`` where ``block[i:i + 2]`` is ``local acc = 0; for v { acc += E }``."""
    if i + 1 >= len(block):
        return None
    local, loop = block[i], block[i + 1]
    if not (isinstance(local, Local) and isinstance(local.init, Const) and local.init.value == 0):
        return None
    if not (isinstance(loop, For) and len(loop.body) == 1 and isinstance(loop.body[0], Accumulate)):
        return None
    add = loop.body[0]
    if add.target != local.name or add.indices:
        return None
    return local.name, loop, add.value


def share_reductions(kernel: Kernel) -> Kernel:
    """A reduction that a fused row body computes again -- the same sum over the same range, nothing
    written between to what it reads -- becomes ``let acc2 = acc1``.

    The chain rule writes such repeats: layer normalisation's gradient defines
    ``dxc_t = sqrt(sum[c](xc[a, c]**2) / C + eps)`` beside ``r = 1 / sqrt(<the same>)``,
    and once ``r`` and ``dxc_t`` share the row loop, the second pass over the row is waste.
    """
    loop = _one_loop(kernel)
    if loop is None:
        return kernel
    block = list(loop.body)
    changed = False
    for i in range(len(block)):
        first = _reduction(block, i)
        if first is None:
            continue
        acc1, loop1, e1 = first
        reads = {n.tensor for n in postorder(e1) if isinstance(n, Access)}  # buffers and scalars (mu_v)
        for j in range(i + 2, len(block)):
            if block[j] is None:
                continue
            second = _reduction(block, j)
            if second is not None:
                acc2, loop2, e2 = second
                same = substitute_stmts(loop2.body, {loop2.var: Affine.var(loop1.var)})
                rest = tuple(st for st in block[j + 2:] if st is not None)
                if ((loop2.lo, loop2.hi) == (loop1.lo, loop1.hi) and same == (Accumulate(acc2, (), e1),)
                        and acc2 not in all_writes(rest)):
                    block[j], block[j + 1] = Let(acc2, Access(acc1, ())), None
                    changed = True
                    continue
            if all_writes((block[j],)) & (reads | {acc1}):
                break  # what the sum reads changes from here on
    if not changed:
        return kernel
    return replace(kernel, body=(replace(loop, body=tuple(st for st in block if st is not None)),))


def fuse_rows_program(program: LoopProgram) -> LoopProgram:
    """Fuse each run of consecutive chained kernels whose fused loop stays parallel, to a fixpoint.

    One left-to-right sweep can miss a pair: ``dx_t`` alone reads nothing
    ``z`` wrote, but once ``dx`` (which does) has joined it, the two groups
    chain (the stable softmax's gradient).  So the sweep repeats until it
    fuses nothing; each round removes a kernel, so it ends.
    """
    while True:
        fused = _sweep(program)
        if fused is program:
            break
        program = fused
    kernels = tuple(share_reductions(k) for k in program.kernels)
    return program if kernels == program.kernels else replace(program, kernels=kernels)


def _sweep(program: LoopProgram) -> LoopProgram:
    fuser = Fuser(program)
    buffers = {b.name for b in program.buffers}
    sizes = set(program.sizes)
    out: list[Kernel] = []
    for k in program.kernels:
        fused = _fuse_pair(fuser, out[-1], k, buffers, sizes) if out else None
        if fused is not None:
            out[-1] = fused
        else:
            out.append(k)
    if len(out) == len(program.kernels):
        return program
    return replace(program, kernels=tuple(out))


@dataclass(frozen=True)
class FuseRows(Pass):
    """Fuse a chain of kernels over their common outer (row) loop when each
    reads only its own row of what the earlier ones wrote and the fused loop
    stays parallel."""

    name = "fuse-rows"
    level = Level.LOOPS
    summary = "chains of kernels over the same outer loop, each reading its own row of the last's results, become one parallel nest"

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return fuse_rows_program(program)
