"""The pieces ``hoist`` moves: a ``let``, a *reduction* or any other statement.

Every phase looks at a block as a sequence of such units: licm moves lets and
reductions out of loops, extract turns them into kernels (and replaces them
by a read), and afterwards the lets and reductions nobody reads are dropped.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from tcc.ir.expr import Const, Where
from tcc.ir.index import Cond
from tcc.ir.loop_analysis import names_read_anywhere, outer_writes
from tcc.ir.loops import For, If, Let, Local, Stmt


@dataclass(frozen=True)
class Unit:
    """A let, a reduction (its ``local`` and the statements that accumulate
    into it) or another statement: what moves, or stays, as one piece."""

    stmts: tuple[Stmt, ...]
    kind: str  # "let", "reduction" or "other"

    @property
    def name(self) -> str:
        return self.stmts[0].name  # type: ignore[union-attr]


def units(body: Sequence[Stmt]) -> list[Unit]:
    """Split a block into lets, reductions and other statements.

    A reduction is ``local acc = init`` followed by every statement right
    after it whose only visible effect is on ``acc`` (loops and tests that
    accumulate into it, with their own lets and locals inside).
    """
    out: list[Unit] = []
    i = 0
    while i < len(body):
        s = body[i]
        if isinstance(s, Let):
            out.append(Unit((s,), "let"))
            i += 1
        elif isinstance(s, Local):
            j = i + 1
            while j < len(body) and not isinstance(body[j], (Let, Local)) and outer_writes((body[j],)) == {s.name}:
                j += 1
            out.append(Unit(tuple(body[i:j]), "reduction"))
            i = j
        else:
            out.append(Unit((s,), "other"))
            i += 1
    return out


def guarded(u: Unit, cond: Cond | None) -> tuple[Stmt, ...]:
    """A let or reduction that only computes where ``cond`` holds (a lazy
    ``where`` for a let, an ``if`` around the accumulation for a reduction)."""
    if cond is None:
        return u.stmts
    if u.kind == "let":
        let = u.stmts[0]
        return (Let(let.name, Where(cond, let.value, Const(0))),)  # type: ignore[union-attr]
    rest = u.stmts[1:]
    return (u.stmts[0], If(cond, rest)) if rest else u.stmts


def replace_unit(body: tuple[Stmt, ...], unit: Unit, new: Stmt) -> tuple[Stmt, ...]:
    first = unit.stmts[0]
    out: list[Stmt] = []
    i = 0
    while i < len(body):
        s = body[i]
        if s is first:
            out.append(new)
            i += len(unit.stmts)
            continue
        if isinstance(s, For):
            s = replace(s, body=replace_unit(s.body, unit, new))
        elif isinstance(s, If):
            s = replace(s, then=replace_unit(s.then, unit, new), orelse=replace_unit(s.orelse, unit, new))
        out.append(s)
        i += 1
    return tuple(out)


def prune_dead(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """Drop lets and reductions whose value nobody reads (extraction leaves
    ``let s = t[j]`` behind when only an extracted let used ``s``)."""
    while True:
        read = names_read_anywhere(body)
        pruned = _prune(body, read)
        if pruned == body:
            return body
        body = pruned


def _prune(body: tuple[Stmt, ...], read: set[str]) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for u in units(body):
        if u.kind != "other" and u.name not in read:
            continue
        for s in u.stmts:
            if isinstance(s, For):
                s = replace(s, body=_prune(s.body, read))
            elif isinstance(s, If):
                s = replace(s, then=_prune(s.then, read), orelse=_prune(s.orelse, read))
            out.append(s)
    return tuple(out)
