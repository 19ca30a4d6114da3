"""What the lowering and the runtimes agree on about kernels: symbols, grid bands, buffers, shapes.

:func:`grid_band` and :func:`band_extents` are read by the lowering (which
spreads a band over GPU threads) and by the CUDA and cuda-sim runtimes (which
size the launch by it); :func:`kernel_buffers` and :func:`kernel_shape`
decide a kernel body's parameters and which kernels share one body (see the
package docstring of :mod:`tcc.backends.llvm`).  Pure functions of the L2
program: no llvmlite here.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

from tcc.ir.diagnostics import TccError
from tcc.ir.expr import Access, Expr, Where, format_matrix_call, postorder, transform
from tcc.ir.index import LOOKUP_ENV, Affine, lookups
from tcc.ir.loops import Accumulate, Buffer, For, If, Kernel, Let, Local, LoopProgram, Stmt, Store, lookup_tensors, stmt_exprs, walk_stmts

__all__ = ["band_extents", "cuda_refusal", "grid_band", "kernel_buffers", "kernel_shape", "kernel_symbol"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def grid_band(kernel: Kernel) -> tuple[For, ...]:
    """The loops a grid kernel spreads over GPU threads (see "Grid kernels" in :mod:`tcc.backends.llvm`).

    The parallel loops perfectly nested from the top of the kernel, as long
    as each one's bounds name no variable of an enclosing band loop: a
    rectangular band, so its iteration space is a product of ranges that
    flattens to one linear index.  Empty when the kernel has no parallel
    outer loop.
    """
    band: list[For] = []
    body = kernel.body
    while len(body) == 1 and isinstance(body[0], For) and body[0].parallel:
        loop = body[0]
        used = {n for a in loop.lo + loop.hi for n in a.names()}
        if used & {b.var for b in band}:
            break
        band.append(loop)
        body = loop.body
    return tuple(band)


def band_extents(band: tuple[For, ...], sizes: Mapping[str, int],
                 buffers: Mapping[str, Any] | None = None) -> tuple[int, ...]:
    """The trip count of each band loop for these sizes (what the runtime sizes the grid by).

    A bound may read an index input (``max(0, s[0])..min(v - 1, s[0])``, the gradient of ``e[s[0]]``):
    its entries come from ``buffers``, where the runtime keeps the index arrays on the host.
    """
    env: Mapping[str, Any] = sizes
    tensors = {look.tensor for loop in band for a in loop.lo + loop.hi for look in lookups(a)}
    if tensors:
        if buffers is None:
            raise ValueError(f"the launch bounds read {', '.join(sorted(tensors))}: their arrays are needed")
        env = dict(sizes)
        for name in tensors:
            arr = np.asarray(buffers[name])
            env[LOOKUP_ENV + name] = lambda idx, arr=arr: int(arr[tuple(int(i) for i in idx)])
    counts = []
    for loop in band:
        lo = max(a.evaluate(env) for a in loop.lo)
        hi = min(a.evaluate(env) for a in loop.hi)
        counts.append(max(0, hi - lo + 1))
    return tuple(counts)


def cuda_refusal(fn: str, arg: "str | tuple[str, ...]", out: str, loc=None, source=None,  # noqa: ANN001
                 transposed: tuple[bool, ...] = ()) -> TccError:
    """The error for a matrix function or product in a program compiled for target cuda."""
    args = arg if isinstance(arg, str) else format_matrix_call(fn, arg, transposed)[len(fn) + 1:-1]
    if fn in ("matmul", "contract", "gram"):  # contract: a general contraction (tcc.ir.contraction)
        what, library = "matrix products", "BLAS"
    else:
        what, library = "matrix functions", "LAPACK"
    return TccError(
        f"{fn}({args}) (definition '{out}') is computed by {library} on the host; the cuda target does not "
        f"support {what} yet: compile for the cpu",
        loc,
        source,
    )


def kernel_symbol(index: int, kernel: Kernel) -> str:
    return f"tcc_{index}_{_UNSAFE.sub('_', kernel.name)}"


def kernel_buffers(program: LoopProgram, kernel: Kernel) -> tuple[tuple[int, Buffer], ...]:
    """The buffers ``kernel`` stores to or reads, with their positions in ``program.buffers``.

    The kernel's body function takes only these (see "Why each kernel is two
    functions"), in the program's buffer order so the IR is deterministic.
    """
    names: set[str] = set()
    for s in walk_stmts(kernel.body):
        if isinstance(s, Store):
            names.add(s.buffer)
        elif isinstance(s, Accumulate):
            names.add(s.target)
        for e in stmt_exprs(s):
            # a 0-d read may be a let or local rather than a buffer: an extra buffer is harmless
            names.update(n.tensor for n in postorder(e) if isinstance(n, Access))
    names |= lookup_tensors(kernel.body)  # index inputs read inside index expressions
    return tuple((k, b) for k, b in enumerate(program.buffers) if b.name in names)


def kernel_shape(program: LoopProgram, kernel: Kernel) -> tuple:
    """``kernel`` with its names replaced by position: equal shapes lower to the same code.

    Buffers become their position among :func:`kernel_buffers` (with their
    shapes), loop variables and ``let``/``local`` names a token per distinct
    name in order of binding; sizes (and anything else) keep their names.
    The renaming is injective, so two kernels with equal shapes are the same
    statements up to a consistent renaming, which lowering does not see
    (names only key its lookups and name LLVM values); the buffers line up
    with the body's parameters because both follow the program's buffer order.
    """
    used = kernel_buffers(program, kernel)
    tokens: dict[str, str] = {b.name: f"\0b{k}" for k, (_, b) in enumerate(used)}
    for st in walk_stmts(kernel.body):
        name = st.var if isinstance(st, For) else st.name if isinstance(st, (Let, Local)) else None
        if name is not None and name not in tokens:
            tokens[name] = f"\0v{len(tokens)}"
    mapping = {n: Affine.var(t) for n, t in tokens.items()}

    def aff(items: tuple[Affine, ...]) -> tuple[Affine, ...]:
        return tuple(a.substitute(mapping) for a in items)

    def node(n: Expr) -> Expr:
        if isinstance(n, Access):
            return Access(tokens.get(n.tensor, n.tensor), aff(n.indices))
        if isinstance(n, Where):
            return Where(n.cond.substitute(mapping), n.then, n.other)
        return n

    def stmts(body: tuple[Stmt, ...]) -> tuple:
        out: list[tuple] = []
        for st in body:
            if isinstance(st, For):
                out.append(("for", tokens[st.var], aff(st.lo), aff(st.hi), st.parallel, stmts(st.body)))
            elif isinstance(st, If):
                out.append(("if", st.cond.substitute(mapping), stmts(st.then), stmts(st.orelse)))
            elif isinstance(st, (Let, Local)):
                value = st.value if isinstance(st, Let) else st.init
                out.append((type(st).__name__, tokens[st.name], transform(value, node)))
            elif isinstance(st, (Store, Accumulate)):
                target = st.buffer if isinstance(st, Store) else st.target
                out.append((type(st).__name__, tokens.get(target, target), aff(st.indices), transform(st.value, node)))
            else:  # an Extern kernel has no body function
                out.append(("other", id(st)))
        return tuple(out)

    return tuple((b.rank, b.shape) for _, b in used), stmts(kernel.body)
