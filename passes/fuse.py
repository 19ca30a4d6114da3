"""``fuse``: consecutive kernels over the same iteration space become one.

``lower-loops`` gives every definition its own loop nest, so a chain of
element-wise definitions (``e = exp(z)``, ``y = e / s``, a zero-fill and the
nest that fills the diagonal) walks the same index space several times, and
every intermediate makes a round trip through memory.  Zhabinski and Zhabinskii fuses such
element-wise operations into one kernel.  Here two consecutive kernels fuse
when each is one loop nest and their ``d`` outermost loops have the same
ranges (after renaming the second kernel's variables to the first's): the
result is one nest over those ``d`` loops whose body is the first kernel's
body followed by the second's.

That is only correct when no iteration of the fused loops needs what another
iteration of the other kernel does: unfused, *all* of kernel 1 ran before
kernel 2.  So for every buffer that one kernel writes and the other reads or
writes, every access in both kernels must touch only elements owned by its
own fused iteration: for each fused loop ``v_k`` there is an index position
whose expression is the same in all those accesses and is ``c*v_k + r`` with
``c != 0`` and ``r`` using only sizes and the fused loops outside ``v_k``.
This map from fused iterations to elements is one to one (triangular), so
distinct iterations touch distinct elements.  Kernel 2 reading kernel 1's
result at another index (``y[i] = x2[i + 1]``), or a 0-d result, fails the
test, and those kernels stay apart.  A deeper fusion is tried first; when the
test fails there, fewer loops are fused (the softmax of a product fuses over
rows even though the row sum reads every column).

When kernel 1 stores ``b[idx] = v`` once per fused iteration, right in the
fused body, and kernel 2 reads ``b[idx]`` at that very index without writing
``b``, the read becomes the stored value (a ``let``), saving the load.

Kernel 2's loop variables and scalars are renamed where they would clash
with kernel 1's (names are only unique per kernel).

``full=true`` fuses only over *all* of both kernels' perfectly nested outer
loops.  Fusing over fewer turns the other loops into sequential loops inside
one iteration of the fused ones: good on a CPU, whose runtime splits only the
outermost loop anyway, but on a GPU it takes loops away from the grid (the
Urban gradient's ``f`` and ``da`` share only their row loop, and fused they
would give one thread per row instead of one per element).  The GPU pipeline
therefore fuses with ``full=true``: element-wise chains still become one
launch (Zhabinski and Zhabinskii, sec. V) and no kernel loses parallelism.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Sequence

from tcc.ir.expr import Access, fresh_name, postorder, transform
from tcc.ir.index import Affine
from tcc.ir.loop_analysis import (
    all_writes,
    bound_inside,
    buffer_accesses,
    map_exprs,
    owns,
    perfect_nest,
    program_names,
    rename_reads,
    substitute_stmts,
    walk_exprs,
    walk_stmts,
)
from tcc.ir.loops import Accumulate, For, Kernel, Let, Local, LoopProgram, Stmt, Store
from tcc.passes.pass_base import Level, Pass, PassContext

#: at DEBUG, why two consecutive kernels stayed apart (``tcc -v``; docs/logging.md)
logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------
# Renaming
# ---------------------------------------------------------------------------


def rename(body: Sequence[Stmt], names: dict[str, str]) -> tuple[Stmt, ...]:
    """Rename loop variables and scalars (``let``/``local``) throughout ``body``."""
    if not names:
        return tuple(body)
    return substitute_stmts(tuple(body), {old: Affine.var(new) for old, new in names.items()}, names)


# ---------------------------------------------------------------------------
# Ownership of accesses
# ---------------------------------------------------------------------------


def separated(accesses: list[tuple[str, tuple[Affine, ...], bool]], fused: Sequence[str], sizes: set[str]) -> bool:
    """All accesses (to one buffer) touch only elements owned by their fused iteration."""
    first = accesses[0][1]
    if not first:
        return False
    used: set[int] = set()
    for k, v in enumerate(fused):
        outer = sizes | set(fused[:k])
        pos = next(
            (
                p
                for p, ix in enumerate(first)
                if p not in used and owns(ix, v, outer) and all(len(a[1]) == len(first) and a[1][p] == ix for a in accesses)
            ),
            None,
        )
        if pos is None:
            return False
        used.add(pos)
    return True


# ---------------------------------------------------------------------------
# Fusing two kernels
# ---------------------------------------------------------------------------


def _spine(kernel: Kernel) -> list[For]:
    """The perfectly nested loops at the top of a kernel (each body one For)."""
    body = kernel.body
    return perfect_nest(body[0]) if len(body) == 1 and isinstance(body[0], For) else []


class Fuser:
    """Fuses pairs of kernels of one program (``fuse`` and ``fuse-rows`` share it):
    it holds the names already taken, so fused kernels and renamed scalars
    get fresh, deterministic names."""

    def __init__(self, program: LoopProgram, full: bool = False) -> None:
        self.full = full
        self.sizes = set(program.sizes)
        self.buffers = {b.name for b in program.buffers}
        self.taken = program_names(program)
        self.kernel_names = {k.name for k in program.kernels}
        self.why: tuple[object, ...] = ("",)  # why the last fuse() returned None: a %-format and its arguments

    def fuse(self, k1: Kernel, k2: Kernel) -> Kernel | None:
        s1, s2 = _spine(k1), _spine(k2)
        if not s1 or not s2:
            self.why = ("kernel %s is not one loop nest", (k2 if s1 else k1).name)
            return None
        # the common prefix of loops with equal ranges, k2's variables renamed
        depth = 0
        names: dict[str, str] = {}
        while depth < min(len(s1), len(s2)):
            a, b = s1[depth], s2[depth]
            sub = {o: Affine.var(n) for o, n in names.items()}
            if tuple(x.substitute(sub) for x in b.lo) != a.lo or tuple(x.substitute(sub) for x in b.hi) != a.hi:
                break
            names[b.var] = a.var
            depth += 1
        if not depth:
            self.why = ("their outer loops %s and %s have different ranges (%s and %s)",
                        s1[0].var, s2[0].var, _Range(s1[0]), _Range(s2[0]))
            return None
        if self.full:
            if not depth == len(s1) == len(s2):
                self.why = ("full=true and only %d of their %d and %d outer loops have equal ranges", depth, len(s1), len(s2))
                return None
            return self.try_depth(k1, k2, s1, s2, depth)
        for d in range(depth, 0, -1):
            fused = self.try_depth(k1, k2, s1, s2, d)
            if fused is not None:
                return fused
        return None

    def try_depth(self, k1: Kernel, k2: Kernel, s1: list[For], s2: list[For], d: int) -> Kernel | None:
        fused_vars = [l.var for l in s1[:d]]
        body1 = s1[d - 1].body
        # rename k2: fused variables to k1's, clashing names to fresh ones
        # (siblings may share names; a name in scope at the join may not be reused)
        clash = set(fused_vars) | {st.name for st in body1 if isinstance(st, (Let, Local))}
        names = {l2.var: l1.var for l1, l2 in zip(s1[:d], s2[:d])}
        for n in sorted(bound_inside(s2[d - 1].body)):
            if n in clash:
                fresh = fresh_name(n, self.taken)
                self.taken.add(fresh)
                names[n] = fresh
        body2 = rename(s2[d - 1].body, names)
        # dependences between the two bodies must stay inside one fused iteration
        acc1 = buffer_accesses(body1, self.buffers)
        acc2 = buffer_accesses(body2, self.buffers)
        w1 = {n for n, _, w in acc1 if w}
        w2 = {n for n, _, w in acc2 if w}
        r1 = {n for n, _, w in acc1 if not w}
        r2 = {n for n, _, w in acc2 if not w}
        shared = (w1 & (r2 | w2)) | (w2 & r1)
        for b in sorted(shared):
            both = [a for a in acc1 + acc2 if a[0] == b]
            if not separated(both, fused_vars, self.sizes):
                self.why = ("%s is written by one and accessed by the other outside the fused iteration over %s",
                            b, _Names(fused_vars))
                return None
        body1, body2 = self.forward(body1, body2, w2)
        inner: tuple[Stmt, ...] = body1 + body2
        for l in reversed(s1[:d]):
            inner = (replace(l, body=inner, parallel=False),)
        name = fresh_name(f"{k1.name}_{k2.name}", self.kernel_names)
        self.kernel_names.add(name)
        return Kernel(name, inner)

    def forward(self, body1: tuple[Stmt, ...], body2: tuple[Stmt, ...], w2: set[str]) -> tuple[tuple[Stmt, ...], tuple[Stmt, ...]]:
        """Reads in ``body2`` of an element that ``body1`` stored, at the very
        same index, become the stored value (through a ``let``)."""
        writes = [s for s in walk_stmts(body1) if isinstance(s, (Store, Accumulate)) and s.indices]
        out1: list[Stmt] = []
        for k, s in enumerate(body1):
            if isinstance(s, Store) and s.buffer not in w2 and _only_write(writes, s):
                target = Access(s.buffer, s.indices)
                if any(target in set(postorder(e)) for e in walk_exprs(body2)):
                    value = s.value
                    declared = {st.name for st in out1 if isinstance(st, (Let, Local))}
                    if not (
                        isinstance(value, Access)
                        and not value.indices
                        and value.tensor in declared
                        and value.tensor not in all_writes(body1[k + 1 :])
                    ):
                        let = fresh_name(f"{s.buffer}_v", self.taken)
                        self.taken.add(let)
                        out1.append(Let(let, value))
                        value = Access(let, ())
                        s = Store(s.buffer, s.indices, value)
                    body2 = map_exprs(body2, lambda e, t=target, v=value: transform(e, lambda n: v if n is t else n))
                    body2 = _drop_copies(body2, value)
            out1.append(s)
        return tuple(out1), body2


class _Range:
    """``lo..hi`` of a loop as the loop printer writes it, printed only if a log line is emitted."""

    def __init__(self, loop: For) -> None:
        self.loop = loop

    def __str__(self) -> str:
        lo = ", ".join(str(x) for x in self.loop.lo)
        hi = ", ".join(str(x) for x in self.loop.hi)
        return f"{lo if len(self.loop.lo) == 1 else 'max(' + lo + ')'}..{hi if len(self.loop.hi) == 1 else 'min(' + hi + ')'}"


class _Names:
    """Names joined with commas, only if a log line is emitted."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = names

    def __str__(self) -> str:
        return ", ".join(self.names)


def _drop_copies(body: tuple[Stmt, ...], value: Access) -> tuple[Stmt, ...]:
    """``let c = v`` at the top of ``body`` (``v`` the forwarded scalar) goes; reads of ``c`` read ``v``."""
    out: list[Stmt] = []
    rest = list(body)
    while rest:
        s = rest.pop(0)
        if isinstance(s, Let) and s.value is value:
            rest = list(rename_reads(tuple(rest), s.name, value.tensor))
            continue
        out.append(s)
    return tuple(out)


def _only_write(writes: list[Stmt], store: Store) -> bool:
    return sum(1 for w in writes if (w.buffer if isinstance(w, Store) else w.target) == store.buffer) == 1  # type: ignore[union-attr]


def fuse_program(program: LoopProgram, full: bool = False) -> LoopProgram:
    fuser = Fuser(program, full)
    out: list[Kernel] = []
    for k in program.kernels:
        # an external kernel (extern inv(A) -> B) has no loops: nothing fuses with it or across it
        if out and k.extern is None and out[-1].extern is None:
            fused = fuser.fuse(out[-1], k)
            if fused is not None:
                out[-1] = fused
                continue
            logger.debug("kernels %s and %s not fused: " + str(fuser.why[0]), out[-1].name, k.name, *fuser.why[1:])
        elif out:
            logger.debug("kernels %s and %s not fused: %s is external", out[-1].name, k.name,
                         out[-1].name if out[-1].extern is not None else k.name)
        out.append(k)
    return replace(program, kernels=tuple(out))


@dataclass(frozen=True)
class Fuse(Pass):
    """Fuse consecutive kernels whose outer loops have the same ranges when no
    fused iteration touches what another iteration of the other kernel does."""

    name = "fuse"
    level = Level.LOOPS
    summary = "consecutive kernels over the same outer loops become one nest when every dependence stays in its iteration"

    # fuse only over all of both kernels' perfectly nested outer loops (the GPU's choice)
    full: bool = False

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return fuse_program(program, self.full)
