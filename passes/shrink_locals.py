"""``shrink-locals``: a local that one loop nest writes and reads row by row keeps only a row per thread.

With ``tcc.compile(..., results=[...])`` a call returns the named definitions
only; the other ``local`` buffers are the program's own business.  In the
attention gradient the softmax's ``e[b, i, j] = exp(...)`` and the adjoint's
``de[b, i, j]`` are such locals, 4 MB each at 8 x 256 x 256: the fused row
kernel writes row ``(b, i)`` of each and reads it back a few loops later in
the same iteration, so every element goes to memory and the cache lines are
fetched for writing, 16 MB of traffic that no one needs.  This pass gives
such a buffer one row per iteration of the kernel's outer loop (array
contraction, as in loop fusion's classic companion)::

    parallel for b in 0..7 {                 parallel for b in 0..7 {
      for i in 0..255 {                        for i in 0..255 {
        for j { e[b, i, j] = exp(...) }          for j { e[b, j] = exp(...) }
        for j { s_acc += e[b, i, j] }    ==>     for j { s_acc += e[b, j] }
        ...                                      ...
                                             temp e[8, 256]       (was local e[8, 256, 256])

The outer loop's index stays (``e[b, j]``): its iterations may run on
different threads at once, and each must have its own row; the loops
between it and the row (``i``) are dropped.  The row stays in L1 from its
write to its last read.

**When.** The buffer is a ``local`` (never an ``output``, an input or a
``temp`` already), of rank ``k + 2`` at least; exactly one kernel touches it
and no external kernel does; the kernel is a nest ``for v0 { for v1 { ...
for vk { B } } }`` (each loop the only statement of the one around it) and
every access is ``X[v0, ..., vk, w]`` with those loop variables, in that
order, and anything for the last index; the first statement of ``B`` that
touches ``X`` is a loop ``for w in 0..<X's last extent - 1>`` that stores
``X[v0, ..., vk, w]`` unconditionally at its top level and does not read
``X``, and no other statement stores or accumulates into ``X``.  Then
every element a later statement of ``B`` reads was written in the same
iteration, so no value crosses iterations of ``v1 .. vk``.

**Only with** ``results=``: ``tcc.compile`` adds the pass to the pipeline
(with ``rematerialize``) when a call returns named results only.  Run in
another pipeline, the buffers it shrinks are no longer returned, as
``rematerialize`` drops the locals no result reads.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tcc.ir.expr import Access, Expr, transform
from tcc.ir.index import Affine
from tcc.ir.loop_analysis import buffer_accesses, map_exprs, map_stmts, perfect_nest
from tcc.ir.loops import Buffer, For, If, Kernel, LoopProgram, Stmt, Store
from tcc.passes.pass_base import Level, Pass, PassContext

#: at DEBUG, which locals were shrunk (docs/logging.md)
logger = logging.getLogger(__name__)


def _nest(kernel: Kernel) -> list[For]:
    """The kernel's loops ``v0 ⊃ v1 ⊃ ...``, each the only statement of the one around it."""
    body = kernel.body
    return perfect_nest(body[0]) if len(body) == 1 and isinstance(body[0], For) else []


def _touches(body: tuple[Stmt, ...], name: str) -> list[tuple[tuple[Affine, ...], bool]]:
    """``(indices, is_write)`` of every access to buffer ``name`` in ``body``."""
    return [(ix, w) for n, ix, w in buffer_accesses(body, {name}) if n == name]


def _writes_row(s: Stmt, buf: Buffer, prefix: tuple[Affine, ...]) -> bool:
    """``s`` is ``for w in 0..<last extent - 1> { ...; X[prefix, w] = v; ... }`` that does not read ``X``."""
    if not isinstance(s, For) or s.lo != (Affine.constant(0),) or s.hi != (buf.shape[-1] - 1,):
        return False
    row = prefix + (Affine.var(s.var),)
    stores = [t for t in s.body if isinstance(t, Store) and t.buffer == buf.name and t.indices == row]
    return bool(stores) and all(w and ix == row for ix, w in _touches(s.body, buf.name))


def _shrinkable(buf: Buffer, users: list[Kernel]) -> tuple[Kernel, int] | None:
    """The kernel and the depth ``k + 1`` of the nest whose body ``B`` holds every access, or ``None``."""
    if buf.role != "local" or len(users) != 1 or users[0].extern is not None or buf.rank < 2:
        return None
    kernel = users[0]
    nest = _nest(kernel)
    accesses = _touches(kernel.body, buf.name)
    depth = buf.rank - 1  # keep v0 and the row index; drop v1 .. v(depth - 1)
    if not 2 <= depth <= len(nest):
        return None
    prefix = tuple(Affine.var(loop.var) for loop in nest[:depth])
    if not all(ix[:depth] == prefix for ix, _ in accesses):
        return None
    body = nest[depth - 1].body
    first = next((i for i, s in enumerate(body) if _touches((s,), buf.name)), None)
    if first is None or not _writes_row(body[first], buf, prefix) or _conditional(body[first], buf.name):
        return None
    if any(w for s in body[first + 1:] for _, w in _touches((s,), buf.name)):
        return None
    return kernel, depth


def _conditional(s: Stmt, name: str) -> bool:
    """Whether a store into ``name`` inside ``s`` sits under an ``if`` (then the row may be partial)."""
    found = False

    def visit(stmts: tuple[Stmt, ...], guarded: bool) -> None:
        nonlocal found
        for t in stmts:
            if isinstance(t, If):
                visit(t.then, True)
                visit(t.orelse, True)
            elif isinstance(t, For):
                visit(t.body, guarded)
            elif isinstance(t, Store) and t.buffer == name and guarded:
                found = True

    visit((s,), False)
    return found


def _rewrite(kernel: Kernel, name: str, depth: int) -> Kernel:
    """Accesses ``name[v0, ..., v(depth-1), w]`` become ``name[v0, w]``."""

    def row(ix: tuple[Affine, ...]) -> tuple[Affine, ...]:
        return (ix[0],) + ix[depth:]

    def node(e: Expr) -> Expr:
        return Access(e.tensor, row(e.indices)) if isinstance(e, Access) and e.tensor == name and e.indices else e

    def leaf(s: Stmt) -> tuple[Stmt, ...]:
        if isinstance(s, Store) and s.buffer == name:
            return (replace(s, indices=row(s.indices)),)
        return (s,)

    body = map_exprs(kernel.body, lambda e: transform(e, node))
    return replace(kernel, body=map_stmts(body, leaf))


def shrink_locals(program: LoopProgram) -> LoopProgram:
    users: dict[str, list[Kernel]] = {}
    for k in program.kernels:
        touched = ({k.extern.out, *k.extern.args} if k.extern is not None
                   else {n for n, _, _ in buffer_accesses(k.body, {b.name for b in program.buffers})})
        for n in touched:
            users.setdefault(n, []).append(k)
    kernels = {k.name: k for k in program.kernels}
    buffers = list(program.buffers)
    for i, buf in enumerate(buffers):
        found = _shrinkable(buf, [kernels[k.name] for k in users.get(buf.name, [])])
        if found is None:
            continue
        kernel, depth = found
        kernels[kernel.name] = _rewrite(kernel, buf.name, depth)
        buffers[i] = replace(buf, shape=(buf.shape[0],) + buf.shape[depth:], role="temp")
        logger.debug("kernel %s: local %s keeps one row per %s: %s", kernel.name, buf.name,
                     _nest(kernel)[0].var, ", ".join(str(e) for e in buffers[i].shape))
    if buffers == list(program.buffers):
        return program
    return replace(program, buffers=tuple(buffers), kernels=tuple(kernels[k.name] for k in program.kernels))


@dataclass(frozen=True)
class ShrinkLocals(Pass):
    """Locals one nest writes and reads back within an iteration keep one row per outer iteration."""

    name = "shrink-locals"
    level = Level.LOOPS
    summary = "(results= pipeline) a local written and read back row by row inside one nest keeps a row per outer iteration"

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return shrink_locals(program)
