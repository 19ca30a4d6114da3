"""``reuse-buffers``: temporaries whose lifetimes do not overlap share memory.

``hoist`` turns reductions into temps, one per reduction, and the runtime
allocates every temp for every call.  A temp is only alive from the first
kernel that touches it to the last one (kernels run one after another), so
two temps of the same shape whose kernel ranges are disjoint can be the same
array: the second is written before it is read (a temp is never returned and
has no contents at the start, so no correct program reads one before writing
it), and by then the first is dead.  Zhabinski and Zhabinskii reuses buffers the same way.

Only ``temp`` buffers take part: inputs belong to the caller, outputs and
locals are returned.  Shapes must be equal as affine expressions of the
sizes (``n`` and ``n`` share, ``n`` and ``m`` do not even when equal at run
time).  The assignment is the greedy interval colouring: temps in order of
their first kernel, each takes the first free buffer of its shape (the one
that has been dead longest), so the result is deterministic.

A temp that no kernel reads is dropped with the stores into it: after
``fuse`` forwards a stored value to the kernel that used to load it, the
store is all that is left of it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Sequence

from tcc.ir.expr import Access, Expr, transform
from tcc.ir.loop_analysis import all_writes, map_exprs, map_stmts, read_names
from tcc.ir.loops import Accumulate, Buffer, Extern, Kernel, LoopProgram, Stmt, Store
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)


def rename_buffers(body: Sequence[Stmt], names: dict[str, str]) -> tuple[Stmt, ...]:
    """Rename buffers in loads, stores and accumulates (scalars never share a buffer's name)."""

    def node(n: Expr) -> Expr:
        if isinstance(n, Access) and n.tensor in names:
            return Access(names[n.tensor], n.indices)
        return n

    return map_stmts(map_exprs(body, lambda e: transform(e, node)), lambda s: (_rename_target(s, names),))


def _rename_target(s: Stmt, names: dict[str, str]) -> Stmt:
    if isinstance(s, Store) and s.buffer in names:
        return replace(s, buffer=names[s.buffer])
    if isinstance(s, Accumulate) and s.target in names:
        return replace(s, target=names[s.target])
    if isinstance(s, Extern):
        return replace(s, out=names.get(s.out, s.out), args=tuple(names.get(a, a) for a in s.args))
    return s


def lifetimes(program: LoopProgram, names: set[str]) -> dict[str, tuple[int, int]]:
    """First and last kernel index touching each of ``names`` (untouched ones left out)."""
    out: dict[str, tuple[int, int]] = {}
    for k, kernel in enumerate(program.kernels):
        touched = (read_names(kernel.body) | all_writes(kernel.body)) & names
        for n in touched:
            first, _ = out.get(n, (k, k))
            out[n] = (first, k)
    return out


def drop_unread_temps(program: LoopProgram) -> LoopProgram:
    """Remove the temps no kernel reads, and the stores into them."""
    temps = {b.name for b in program.by_role("temp")}
    read: set[str] = set()
    for k in program.kernels:
        read |= read_names(k.body)
    dead = temps - read
    if not dead:
        return program
    kernels = tuple(Kernel(k.name, _drop_writes(k.body, dead)) for k in program.kernels)
    return replace(program, buffers=tuple(b for b in program.buffers if b.name not in dead), kernels=kernels)


def _drop_writes(body: Sequence[Stmt], dead: set[str]) -> tuple[Stmt, ...]:
    def keep(s: Stmt) -> tuple[Stmt, ...]:
        if isinstance(s, Store) and s.buffer in dead or isinstance(s, Accumulate) and s.target in dead:
            return ()
        return (s,)

    return map_stmts(body, keep)


def reuse_buffers(program: LoopProgram) -> LoopProgram:
    program = drop_unread_temps(program)
    temps = program.by_role("temp")
    if not temps:
        return program
    life = lifetimes(program, {b.name for b in temps})
    order = sorted((b for b in temps if b.name in life), key=lambda b: (life[b.name][0], temps.index(b)))
    slots: list[tuple[Buffer, int]] = []  # (buffer, last kernel that uses it)
    names: dict[str, str] = {}
    for b in order:
        first, last = life[b.name]
        free = [
            (end, i) for i, (slot, end) in enumerate(slots) if slot.shape == b.shape and end < first
        ]
        if free:
            _, i = min(free)
            slot, _ = slots[i]
            names[b.name] = slot.name
            slots[i] = (slot, last)
        else:
            slots.append((b, last))
    if len(slots) == len(temps) and not names:
        return program
    kept = {slot.name for slot, _ in slots}
    buffers = tuple(b for b in program.buffers if b.role != "temp" or b.name in kept)
    kernels = tuple(Kernel(k.name, rename_buffers(k.body, names)) for k in program.kernels) if names else program.kernels
    return replace(program, buffers=buffers, kernels=kernels)


@dataclass(frozen=True)
class ReuseBuffers(Pass):
    """Temps of equal shape whose kernel ranges do not overlap share one buffer."""

    name = "reuse-buffers"
    level = Level.LOOPS
    summary = "temps of equal shape with disjoint lifetimes (first..last kernel) share one buffer"

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return reuse_buffers(program)
