"""How a windowed ``contract`` runs: the plan of the shifted GEMMs.

A pure function of the spec and the operands' shapes, shared by the runtime
(``tcc.runtime.externs.window_kernel``, which follows it) and the ``blas`` pass (whose cost
model reads the GEMM dimensions it will get): see ``tcc.runtime.externs.window_kernel`` for
the method.  No NumPy here: the IR layer is plain Python.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .contraction import Spec, spec_extents, window

__all__ = ["MERGED", "WindowPlan", "padding", "window_plan"]


def padding(spec: Spec, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """Zeros to add before and after each axis of ``A`` so that every window read is in range."""
    ext, bad = spec_extents(spec, a_shape, b_shape)
    assert bad is None, bad
    pads = []
    for x, e in zip(spec[0], a_shape):
        w = window(x)
        if w is None:
            pads.append((0, 0))
            continue
        u, sign, v = w
        lo, hi = (0, ext[u] + ext[v] - 2) if sign > 0 else (1 - ext[v], ext[u] - 1)
        pads.append((max(0, -lo), max(0, hi - (e - 1))) if ext[u] > 0 and ext[v] > 0 else (0, 0))
    return pads


MERGED = "#P"  # the name of the merged position axis


@dataclass(frozen=True)
class _Window:
    axis: int      # A's axis
    pos: str       # the index that stays an axis of the view
    off: str       # the index looped over
    coef: int      # position in the padded axis: base + coef * off + pos
    base: int


@dataclass(frozen=True)
class WindowPlan:
    """How one call runs (a function of the spec and the shapes only)."""

    ext: dict[str, int]
    pads: tuple[tuple[int, int], ...]
    windows: tuple[_Window, ...]
    merged: tuple[str, ...]          # the positions merged into one axis (empty: none)
    widths: tuple[int, ...]          # their extents in the widened layouts (the padded extents of A)
    a_names: tuple[str, ...]         # the view of A per offset, one name per axis (MERGED for the block)
    gemm_axes: tuple[str, str, str]  # (M, K, N): the GEMM's dimensions ("" for an empty group: extent 1)
    b_order: tuple[str, ...]         # the packed B: offsets in B, looped indices in B, K, N
    o_order: tuple[str, ...]         # the result's scratch: offsets in out, looped in out, M and N in out's order
    free_loops: tuple[str, ...]      # offsets and looped indices of the result: different parts of it
    acc_loops: tuple[str, ...]       # offsets and looped indices summed over: products added up
    fold: str = ""                   # an offset folded into the GEMM's N dimension (:func:`_fold`)


def _choose(names: list[str], ext: dict[str, int], prefer: Callable[[str], bool]) -> str:
    return max(names, key=lambda x: (prefer(x), ext[x])) if names else ""


def window_plan(spec: Spec, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> WindowPlan:
    """The plan of ``tcc.runtime.externs.window_kernel.run_window`` for these shapes (see that module's docstring).

    The batch of a convolution stays a looped index: copying ``A`` so that it
    joins the merged positions (9 GEMMs instead of 72 for a 3x3 kernel over a
    batch of 8) measured slower, the copy costing more than the larger
    products saved (docs/benchmarks.md)."""
    ia, ib, io = spec
    ext, bad = spec_extents(spec, a_shape, b_shape)
    assert bad is None, bad
    pads = tuple(padding(spec, a_shape, b_shape))
    padded = [n + lo + hi for n, (lo, hi) in zip(a_shape, pads)]
    wins = []
    for k, x in enumerate(ia):
        w = window(x)
        if w is None:
            continue
        u, sign, v = w
        if sign < 0 or ext[v] < ext[u] or (ext[v] == ext[u] and v not in io):
            pos, off = u, v
        else:
            pos, off = v, u
        coef = sign if off == v else 1
        wins.append(_Window(k, pos, off, coef, pads[k][0]))
    positions = [w.pos for w in wins]
    axes = [w.axis for w in wins]
    holders = {(p in ib, p in io) for p in positions}
    merge = (len(axes) >= 2 and axes == list(range(axes[0], axes[0] + len(axes)))
             and len(holders) == 1 and holders != {(True, True)})
    merged = tuple(positions) if merge else ()
    widths = tuple(padded[k] for k in axes) if merge else ()
    if merge:
        ext = dict(ext)
        ext[MERGED] = sum((ext[p] - 1) * math.prod(widths[i + 1:]) for i, p in enumerate(merged)) + 1
    a_names: list[str] = []
    for k, x in enumerate(ia):
        w = window(x)
        name = x if w is None else next(v.pos for v in wins if v.axis == k)
        if name in merged:
            if name == merged[0]:
                a_names.append(MERGED)
            continue
        a_names.append(name)

    def sub(ix: tuple[str, ...]) -> list[str]:
        offs = {w.off for w in wins}
        out, done = [], False
        for x in ix:
            if x in offs:
                continue
            if x in merged:
                if not done:
                    out.append(MERGED)
                    done = True
                continue
            out.append(x)
        return out

    sa, sb, so = set(a_names), set(sub(ib)), set(sub(io))
    item_stride = _a_strides(a_names, padded, merged, wins, ia)
    m = _choose([x for x in a_names if x in so and x not in sb], ext, lambda x: item_stride[x] == 1)
    k_ = _choose([x for x in a_names if x in sb and x not in so], ext, lambda x: item_stride[x] == 1)
    n = _choose([x for x in sub(io) if x in sb and x not in sa], ext, lambda x: False)
    gemm_axes = (m, k_, n)
    loops_b = [x for x in sub(ib) if x not in gemm_axes]
    loops_o = [x for x in sub(io) if x not in gemm_axes]
    offs_b = [w.off for w in wins if w.off in ib]
    offs_o = [w.off for w in wins if w.off in io]
    b_order = tuple(offs_b + loops_b + [x for x in (k_, n) if x])
    mn = [x for x in sub(io) if x in (m, n) and x]
    o_order = tuple(offs_o + loops_o + mn)
    free = tuple(offs_o + loops_o)
    acc = tuple([w.off for w in wins if w.off not in io] + [x for x in loops_b if x not in so])
    plan = WindowPlan(ext, pads, tuple(wins), merged, widths, tuple(a_names), gemm_axes, b_order, o_order, free, acc)
    return _fold(plan, ib, io)


def _fold(plan: WindowPlan, ib: tuple[str, ...], io: tuple[str, ...]) -> WindowPlan:
    """The weight gradient's innermost offset folded into the GEMM's N dimension.

    Where the merged positions are summed (``B`` is copied into the widened
    layout anyway) and the innermost window's offset ``f`` is free, ``B`` is
    copied once per value of ``f``, shifted by it along the merged positions:
    ``B_f[P + t, t, n] = B[P, n]``.  The products of all values of ``f`` are
    then one GEMM with ``N`` = ``(f, n)`` and the positions one longer per
    extra value: 24 GEMMs of 32 x 96 x 1088 instead of 72 of 32 x 32 x 1086
    for a 3x3 kernel (``dw`` of the conv2d-s1 family: 2.8-3.4 ms against
    4.0-4.2 in a prototype, the shifted copies included)."""
    m, k, n = plan.gemm_axes
    if not plan.merged or k != "#P" or not n or plan.merged[0] in io:
        return plan
    last = max(plan.windows, key=lambda w: w.axis)
    f = last.off
    if last.coef != 1 or f not in io or f in ib or plan.ext[f] < 2 or f not in plan.free_loops:
        return plan
    if plan.ext["#P"] + plan.ext[f] - 1 > plan.ext[plan.merged[0]] * math.prod(plan.widths[1:]):
        return plan
    rest = [x for x in plan.o_order if x not in (f, m, n)]
    mn = [x for x in plan.o_order if x in (m, n)]
    tail = [f, n, m] if mn[0] == n else [m, f, n]
    o_order = tuple(rest + [x for x in tail if x])
    free = tuple(x for x in plan.free_loops if x != f)
    b_order = tuple(x for x in plan.b_order if x not in (k, n)) + (n, k)  # rows (f, n), the positions last
    return WindowPlan(plan.ext, plan.pads, plan.windows, plan.merged, plan.widths, plan.a_names, plan.gemm_axes,
                      b_order, o_order, free, plan.acc_loops, f)


def _a_strides(a_names: list[str], padded: list[int], merged: tuple[str, ...], wins: list[_Window],
               ia: tuple[str, ...]) -> dict[str, int]:
    """The strides (in elements) of the view of the padded, C-ordered ``A`` per name."""
    strides = [math.prod(padded[k + 1:]) for k in range(len(padded))]
    out: dict[str, int] = {}
    for k, x in enumerate(ia):
        w = window(x)
        name = x if w is None else next(v.pos for v in wins if v.axis == k)
        out[MERGED if name in merged else name] = strides[k]  # the merged block: its last axis's stride
    return out
