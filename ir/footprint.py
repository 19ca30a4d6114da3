"""Block footprints: the box of every tensor a block of one definition reads.

A block of a definition ``y[i, j] = body`` is a box of its output indices
(``i`` in ``lo_i..hi_i - 1`` and so on) at concrete sizes.  Every read
``T[e_0, e_1, ...]`` in ``body`` is affine in the output indices and the
enclosing sum variables, whose ranges are affine too, so the smallest box of
``T`` the block touches is, per axis, the minimum and maximum of ``e_t`` over
a polyhedron: exactly what :func:`tcc.ir.polyhedra.expression_range`
(Fourier-Motzkin with integer tightening) answers for the bounds check of
``infer-ranges``.  The same facts are used (sum ranges, ``where`` guards,
constrained sums, assumptions), with the sizes and the block's index ranges
added as constants, so the footprint is the one the bounds proof reasons
about.  Reads under a guard that the block makes infeasible are dropped.

Why in ``ir/``: it is a question about index maps alone; ``tcc.dask``
(compiler layer) asks it for every block it schedules.  Reads through index
arrays (``x[tok[i]]``) cannot be bounded from the maps: such an axis is read
whole (``None`` in the answer's per-axis boxes means the whole extent).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from .bounds import facts_at, uses
from .index import Affine, Compare, lookups
from .polyhedra import Facts, expression_range, program_facts
from .program import Definition, Program

__all__ = ["Box", "block_facts", "footprint", "index_range"]

#: Per axis ``(lo, hi)`` (``hi`` exclusive), or ``None`` for "the whole axis".
Box = tuple["tuple[int, int] | None", ...]


def block_facts(program: Program, d: Definition, sizes: Mapping[str, int],
                box: Mapping[str, tuple[int, int]]) -> Facts:
    """What holds inside the block ``box`` of ``d`` at these sizes.

    ``box`` maps index names (output indices, and optionally sum variables) to
    ``(lo, hi)`` with ``hi`` exclusive; output indices not in ``box`` range over
    their whole extent.  A sum variable in ``box`` restricts *every* sum over a
    variable of that name (to restrict one sum, clip its range in the body).
    """
    assert d.extents is not None, "footprints need inferred extents (run infer-ranges first)"
    facts = program_facts(program.sizes(), program.assumptions)
    for name, value in sizes.items():
        facts = facts.with_cond(Compare("==", Affine.var(name), Affine.constant(int(value))))
    for name, ext in zip(d.indices, d.extents):
        lo, hi = box.get(name, (0, int(ext.evaluate(sizes))))
        facts = facts.with_range(name, [Affine.constant(lo)], [Affine.constant(hi - 1)])
    for name, (lo, hi) in box.items():
        if name not in d.indices:
            facts = facts.with_range(name, [Affine.constant(lo)], [Affine.constant(hi - 1)])
    return facts


def index_range(facts: Facts, e: Affine, sizes: Mapping[str, int]) -> tuple[int, int] | None:
    """``(min, max + 1)`` of ``e`` over the facts, or None when it is unbounded or not affine."""
    if lookups(e):
        return None
    got = expression_range(facts, e, [])
    if got is None or not got[0] or not got[1]:
        return None
    lo = max(int(a.evaluate(sizes)) for a in got[0])
    hi = min(int(a.evaluate(sizes)) for a in got[1])
    return lo, hi + 1


def footprint(program: Program, d: Definition, sizes: Mapping[str, int],
              box: Mapping[str, tuple[int, int]]) -> dict[str, Box]:
    """For every tensor ``d`` reads, the box of it that the block ``box`` of ``d`` reads.

    Tensors with no feasible read in the block are left out; an axis whose
    index cannot be bounded (an indirect read) is ``None`` (whole).  An empty
    block (some ``lo >= hi``) reads nothing.
    """
    if any(lo >= hi for lo, hi in box.values()):
        return {}
    base = block_facts(program, d, sizes, box)
    boxes: dict[str, list[tuple[int, int] | None]] = {}
    for use in uses(d.body):
        if use.lookup is not None:
            continue  # index-array reads inside indices: part of the indirect axis, read whole
        facts = facts_at(base, use)
        if not facts.consistent():
            continue
        ranges = [index_range(facts, ix, sizes) for ix in use.access.indices]
        if any(r is not None and r[0] >= r[1] for r in ranges):
            continue  # an empty range: the read never happens in this block
        old = boxes.get(use.access.tensor)
        boxes[use.access.tensor] = ranges if old is None else [_union(a, b) for a, b in zip(old, ranges)]
    return {name: tuple(axes) for name, axes in boxes.items()}


def _union(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    if a is None or b is None:
        return None
    return min(a[0], b[0]), max(a[1], b[1])


def clip(box: Box, shape: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """``box`` as concrete ranges inside ``shape`` (``None`` axes: whole)."""
    return tuple((0, n) if r is None else (max(r[0], 0), min(r[1], n)) for r, n in zip(box, shape))
