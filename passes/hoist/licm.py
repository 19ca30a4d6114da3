"""``hoist``'s licm phase (step a): lets and reductions move out of loops they do not depend on.

Innermost loops first, so a unit travels outwards as far as it can; a load
that is in bounds only where the loop it leaves runs keeps that test.  See
the package docstring.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from tcc.ir.index import make_and
from tcc.ir.loop_analysis import outer_writes, read_names, walk_stmts
from tcc.ir.loops import For, If, Let, Local, Stmt
from tcc.ir.polyhedra import Facts

from .safety import BoundsChecker, nonempty_guard, with_negation
from .units import guarded, units

logger = logging.getLogger(__package__)  # tcc.passes.hoist: at DEBUG, invariant code that stays


class Licm:
    """Step a over one kernel, innermost loops first.

    ``unique``: names declared exactly once in the kernel (lets, locals, loop
    variables).  Only those move: a name also declared in a sibling block
    could meet its twin in the block it moves to (``lower-loops`` makes every
    name unique, hand-written L2 need not).
    """

    def __init__(self, checker: BoundsChecker, body: tuple[Stmt, ...], kernel: str = "") -> None:
        self.checker = checker
        self.kernel = kernel  # its name, for the log
        counts: dict[str, int] = {}
        for s in walk_stmts(body):
            if isinstance(s, (Let, Local, For)):
                n = s.var if isinstance(s, For) else s.name
                counts[n] = counts.get(n, 0) + 1
        self.unique = {n for n, c in counts.items() if c == 1}

    def block(self, body: tuple[Stmt, ...], facts: Facts, pinned: bool = False) -> tuple[Stmt, ...]:
        """``pinned``: the block is a kernel body that is one loop nest; nothing
        may be hoisted out of that loop (it would stop the loop being split)."""
        out: list[Stmt] = []
        for s in body:
            if isinstance(s, For):
                inner = facts.with_range(s.var, s.lo, s.hi)
                s = replace(s, body=self.block(s.body, inner))
                if not pinned:
                    hoisted, s = self.out_of(s, facts)  # type: ignore[assignment]
                    at = _reduction_start(out, s) if s is not None else len(out)
                    out[at:at] = hoisted
                if s is None:
                    continue
            elif isinstance(s, If):
                s = replace(
                    s,
                    then=self.block(s.then, facts.with_cond(s.cond)),
                    orelse=self.block(s.orelse, with_negation(facts, s.cond)),
                )
            out.append(s)
        return tuple(out)

    def out_of(self, loop: For, facts: Facts) -> tuple[list[Stmt], For | None]:
        parts = units(loop.body)
        writes = [outer_writes(u.stmts) for u in parts]
        staying = [True] * len(parts)
        hoisted: list[Stmt] = []
        for k, u in enumerate(parts):
            if u.kind == "other":
                continue
            others = set().union(*(w for j, w in enumerate(writes) if staying[j] and j != k))
            used = read_names(u.stmts)
            if loop.var in used or used & others:
                continue
            if u.name not in self.unique:
                self.stays(u.kind, u.name, loop, "its name is declared more than once in the kernel")
                continue
            if u.kind == "reduction" and u.name in others:
                self.stays(u.kind, u.name, loop, "the accumulator is also written elsewhere in the loop")
                continue
            stmts = u.stmts
            if not self.checker.stmts_ok(stmts, facts):
                # the loads are safe only where the loop runs: keep that test
                if not self.checker.stmts_ok(stmts, facts.with_range(loop.var, loop.lo, loop.hi)):
                    self.stays(u.kind, u.name, loop, "a load is not provably in bounds in front of the loop")
                    continue
                stmts = guarded(u, make_and(nonempty_guard(loop, facts)))
            staying[k] = False
            hoisted.extend(stmts)
        body = tuple(s for k, u in enumerate(parts) if staying[k] for s in u.stmts)
        return hoisted, (replace(loop, body=body) if body else None)

    def stays(self, kind: str, name: str, loop: For, why: str) -> None:
        """Log (DEBUG) why an invariant ``let``/reduction stays inside ``loop``."""
        logger.debug("kernel %s: invariant %s %s stays in loop %s: %s", self.kernel, kind, name, loop.var, why)


def _reduction_start(out: list[Stmt], loop: For) -> int:
    """Where code hoisted out of ``loop`` goes: in front of the loop, or, when
    the loop continues a reduction (``local acc = 0`` and loops that only
    accumulate into ``acc``), in front of its ``local`` so the reduction stays
    one unit for later steps."""
    w = outer_writes((loop,))
    if len(w) != 1:
        return len(out)
    (acc,) = w
    j = len(out)
    while j > 0 and not isinstance(out[j - 1], (Let, Local)) and outer_writes((out[j - 1],)) == {acc}:
        j -= 1
    if j > 0 and isinstance(out[j - 1], Local) and out[j - 1].name == acc:  # type: ignore[union-attr]
        return j - 1
    return len(out)
