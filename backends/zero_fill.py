"""Kernels that only set a fresh result to zero: the runtime allocates it zeroed and skips them.

``lower-loops`` gives a guarded definition (``where(c == a, ..., 0)``, the
block-diagonal Hessian of matrix factorization) a ``<D>_fill`` kernel that
stores 0 into every element before the kernels for the guarded part write
theirs.  For a result the caller did not pass, the runtime can ask the
operating system for zeroed memory instead (``np.zeros``: pages that are
mapped, already zero, only when first touched) and skip the fill.  At
n = 1000 the matrix-factorization Hessian is a 200 MB result of which the
guarded part writes one page in ten: the fill wrote all of them (9.7 ms
and the page mapping of the whole array).

A kernel qualifies when its body is one perfect nest of loops, each from 0
to the buffer's extent minus 1 in the buffer's dimension order, around a
single ``B[v1, ..., vk] = 0``; when no earlier kernel writes ``B``; and
when ``B`` is a result (``output`` or ``local``), never a temporary, whose
storage ``reuse-buffers`` may share with another.
"""
from __future__ import annotations

from typing import Mapping

from tcc.ir.expr import Const
from tcc.ir.index import Affine
from tcc.ir.loop_analysis import all_writes
from tcc.ir.loops import For, Kernel, LoopProgram, Store

__all__ = ["zero_fills"]


def _filled(kernel: Kernel, shape: Mapping[str, tuple[Affine, ...]]) -> str | None:
    """The buffer ``kernel`` sets to zero everywhere and does nothing else, if any."""
    body, loops = kernel.body, []
    while len(body) == 1 and isinstance(body[0], For):
        loops.append(body[0])
        body = body[0].body
    if len(body) != 1 or not isinstance(body[0], Store) or body[0].value != Const(0):
        return None
    store = body[0]
    ext = shape.get(store.buffer)
    if ext is None or len(ext) != len(loops) or store.indices != tuple(Affine.var(f.var) for f in loops):
        return None
    zero, one = Affine.constant(0), Affine.constant(1)
    if any(f.lo != (zero,) or f.hi != (e - one,) for f, e in zip(loops, ext)):
        return None
    return store.buffer


def zero_fills(program: LoopProgram) -> dict[str, str]:
    """Kernel name -> the result buffer it only zero-fills, for the kernels that are its first writer."""
    shape = {b.name: tuple(b.shape) for b in program.buffers if b.role in ("output", "local")}
    written: set[str] = set()
    out: dict[str, str] = {}
    for k in program.kernels:
        target = _filled(k, shape) if k.extern is None else None
        if target is not None and target not in written:
            out[k.name] = target
        written |= {k.extern.out} if k.extern is not None else all_writes(k.body)
    return out
