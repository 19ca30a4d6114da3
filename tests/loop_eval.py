"""A tiny reference evaluator for L2 loop programs (tests only).

It runs a :class:`tcc.ir.loops.LoopProgram` statement by statement in plain
Python over NumPy arrays, so it is slow (use sizes of a handful) but has no
cleverness that could hide a bug in an L2 pass.  It is strict where compiled
code would silently misbehave:

* every load and store is bounds-checked (``IndexError`` names the buffer),
  also loads in a ``where`` branch that is taken;
* result and temporary buffers start as NaN, so reading an element that no
  kernel wrote shows up in the results;
* reading a scalar (``let``/``local``) that is not in scope raises;
* a ``parallel for`` is checked for races on the run at hand: an element
  written by one iteration and read or written by another raises
  ``AssertionError``;
* an external kernel (``extern inv(A) -> B``) runs the interpreter's
  :func:`tcc.runtime.externs.matrix_functions.matrix_function`; an argument with an element that
  no kernel wrote (NaN) raises.

``run_loops(program, inputs)`` returns every ``output`` and ``local`` buffer
(what the runtime returns); ``temps=True`` adds the temporaries.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tcc.reference.interpreter import _BINARY, _COMPARE, _UNARY
from tcc.runtime.externs.matrix_functions import einsum_contract, matrix_function
from tcc.ir.expr import INDEX_VALUE, Access, Binary, Const, Expr, Select, Unary, Where
from tcc.index_inputs import inverse_index, rows_of
from tcc.ir.index import LOOKUP_ENV, Affine
from tcc.ir.loops import Accumulate, Extern, For, If, Let, Local, LoopProgram, Stmt, Store


class RaceError(AssertionError):
    pass


def bind_loop_sizes(program: LoopProgram, inputs: Mapping[str, Any]) -> dict[str, int]:
    """Sizes from input shapes (an extent that is a single size name binds it)."""
    sizes: dict[str, int] = {}
    for b in program.by_role("input"):
        if b.derived:  # computed by the call, not passed
            continue
        shape = np.shape(inputs[b.name])
        for ext, n in zip(b.shape, shape):
            if len(ext.terms) == 1 and ext.terms[0][1] == 1 and isinstance(ext.terms[0][0], str):
                sizes[ext.terms[0][0]] = int(n) - ext.const
    return sizes


class _Race:
    """Element-level access log of one run of a parallel loop."""

    def __init__(self) -> None:
        self.iteration: int | None = None
        self.writes: dict[tuple, int] = {}
        self.reads: dict[tuple, set[int]] = {}

    def read(self, key: tuple) -> None:
        w = self.writes.get(key)
        if w is not None and w != self.iteration:
            raise RaceError(f"{key} read in iteration {self.iteration}, written in iteration {w}")
        self.reads.setdefault(key, set()).add(self.iteration)  # type: ignore[arg-type]

    def write(self, key: tuple) -> None:
        w = self.writes.get(key)
        if w is not None and w != self.iteration:
            raise RaceError(f"{key} written in iterations {w} and {self.iteration}")
        others = self.reads.get(key, set()) - {self.iteration}
        if others:
            raise RaceError(f"{key} written in iteration {self.iteration}, read in {sorted(others)}")
        self.writes[key] = self.iteration  # type: ignore[assignment]


class _Run:
    def __init__(self, program: LoopProgram, buffers: dict[str, np.ndarray], sizes: dict[str, int]) -> None:
        self.program = program
        self.buffers = buffers
        self.sizes = sizes
        self.race: _Race | None = None
        self.counts: dict[str, int] = {}

    def index(self, name: str, indices, env) -> tuple[int, ...]:
        arr = self.buffers[name]
        idx = tuple(int(a.evaluate(env)) for a in indices)
        if len(idx) != arr.ndim or any(not 0 <= i < n for i, n in zip(idx, arr.shape)):
            raise IndexError(f"{name}{list(idx)} out of bounds for shape {arr.shape}")
        return idx


def run_loops(
    program: LoopProgram,
    inputs: Mapping[str, Any],
    sizes: Mapping[str, int] | None = None,
    temps: bool = False,
    counts: dict[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Run every kernel in order; return the output and local buffers (and temps).

    ``counts``, when given, gets ``iterations`` (loop bodies run, all loops
    together) and ``loads`` (buffer elements read): a measure of work that
    shows what a pass saves without timing anything.
    """
    sizes = dict(sizes) if sizes is not None else bind_loop_sizes(program, inputs)
    buffers: dict[str, np.ndarray] = {}
    for b in program.buffers:
        shape = tuple(int(e.evaluate(sizes)) for e in b.shape)
        if b.bound is not None:  # an index buffer: integers, given or derived (in declaration order)
            buffers[b.name] = _index_buffer(program, b, inputs, buffers, sizes)
        elif b.role == "input":
            arr = np.asarray(inputs[b.name], dtype=np.float64)
            if arr.shape != shape:
                raise ValueError(f"input {b.name} has shape {arr.shape}, expected {shape}")
            buffers[b.name] = arr.copy()
        else:
            if any(n < 0 for n in shape):
                raise ValueError(f"{b.role} {b.name} has negative extent {shape}")
            buffers[b.name] = np.full(shape, np.nan)
    run = _Run(program, buffers, sizes)
    run.counts = counts if counts is not None else {}
    run.counts.setdefault("iterations", 0)
    run.counts.setdefault("loads", 0)
    env: dict[str, Any] = dict(sizes)
    for b in program.buffers:
        if b.bound is not None:
            env[LOOKUP_ENV + b.name] = _lookup(run, b.name)
    with np.errstate(all="ignore"):
        for k in program.kernels:
            _run_kernel(run, k.body, dict(env))
    roles = ("output", "local", "temp") if temps else ("output", "local")
    return {b.name: buffers[b.name] for b in program.by_role(*roles)}


def _index_buffer(program: LoopProgram, b: Any, inputs: Mapping[str, Any], buffers: dict[str, np.ndarray],
                  sizes: Mapping[str, int]) -> np.ndarray:
    """An index buffer's int64 entries: the caller's, or derived from an earlier one as a call derives them."""
    if not b.derived:
        return np.asarray(inputs[b.name], dtype=np.int64)
    fn, src = b.derived
    op, bound = program.buffer(src).bound  # type: ignore[union-attr]
    h = int(bound.evaluate(sizes)) - (1 if op == "<" else 0)
    return rows_of(buffers[src], h) if fn == "rows" else inverse_index(buffers[src], h)[fn == "inverse_perm"]


def _lookup(run: "_Run", name: str) -> Any:
    """Reads of an index buffer inside index expressions, bounds-checked like every load."""
    def read(idx: list) -> int:
        key = run.index(name, [Affine.constant(int(i)) for i in idx], {})
        run.counts["loads"] = run.counts.get("loads", 0) + 1
        return int(run.buffers[name][key])

    return read


def _run_kernel(run: _Run, body: tuple[Stmt, ...], env: dict) -> None:
    # Scalars live in explicit, mutable frames: a block pushes a frame, a
    # name is looked up from the innermost frame out, and an accumulate
    # updates the frame that declared the local.
    frames: list[dict[str, Any]] = []

    def lookup(name: str) -> dict | None:
        for f in reversed(frames):
            if name in f:
                return f
        return None

    def expr(e: Expr, env: dict) -> Any:
        if isinstance(e, Access) and not e.indices:
            f = lookup(e.tensor)
            if f is not None:
                return f[e.tensor][1]
            if e.tensor not in run.buffers:
                raise NameError(f"'{e.tensor}' is not in scope")
        if isinstance(e, Const):
            return np.float64(e.value)
        if isinstance(e, Access) and e.tensor == INDEX_VALUE:  # an index or size as a value
            return np.float64(e.indices[0].evaluate(env))
        if isinstance(e, Select):  # a value condition: eager
            lhs, rhs, then, other = (np.float64(expr(c, env)) for c in e.children())
            return then if _COMPARE[e.op](lhs, rhs) else other
        if isinstance(e, Access):
            if e.tensor not in run.buffers:
                raise NameError(f"'{e.tensor}' is not in scope")
            idx = run.index(e.tensor, e.indices, env)
            if run.race is not None:
                run.race.read((e.tensor,) + idx)
            run.counts["loads"] += 1
            return run.buffers[e.tensor][idx]
        if isinstance(e, Unary):
            return _UNARY[e.op](np.float64(expr(e.operand, env)))
        if isinstance(e, Binary):
            return _BINARY[e.op](np.float64(expr(e.lhs, env)), np.float64(expr(e.rhs, env)))
        if isinstance(e, Where):
            return expr(e.then if e.cond.evaluate(env) else e.other, env)
        raise TypeError(f"not an L2 scalar expression: {e!r}")

    def block(body: tuple[Stmt, ...], env: dict) -> None:
        frames.append({})
        try:
            for s in body:
                stmt(s, env)
        finally:
            frames.pop()

    def define(name: str, kind: str, value: Any) -> None:
        if lookup(name) is not None:
            raise NameError(f"'{name}' defined twice in one scope chain")
        frames[-1][name] = (kind, value)

    def stmt(s: Stmt, env: dict) -> None:
        if isinstance(s, For):
            lo = max(int(a.evaluate(env)) for a in s.lo)
            hi = min(int(a.evaluate(env)) for a in s.hi)
            if s.var in env:
                raise NameError(f"loop variable '{s.var}' shadows an enclosing one or a size")
            own_race = s.parallel and run.race is None
            if own_race:
                run.race = _Race()
            try:
                for v in range(lo, hi + 1):
                    if own_race:
                        run.race.iteration = v  # type: ignore[union-attr]
                    run.counts["iterations"] += 1
                    block(s.body, {**env, s.var: v})
            finally:
                if own_race:
                    run.race = None
        elif isinstance(s, Let):
            define(s.name, "let", expr(s.value, env))
        elif isinstance(s, Local):
            define(s.name, "local", expr(s.init, env))
        elif isinstance(s, Store) and not s.indices and lookup(s.buffer) is not None:
            f = lookup(s.buffer)  # a local scalar set anew (a max reduction: acc = max(acc, ...))
            kind, _ = f[s.buffer]
            if kind != "local":
                raise NameError(f"store to '{s.buffer}', which is a let")
            f[s.buffer] = (kind, expr(s.value, env))
        elif isinstance(s, Store):
            idx = run.index(s.buffer, s.indices, env)
            value = expr(s.value, env)
            if run.race is not None:
                run.race.write((s.buffer,) + idx)
            run.buffers[s.buffer][idx] = value
        elif isinstance(s, Accumulate):
            value = expr(s.value, env)
            f = lookup(s.target) if not s.indices else None
            if f is not None:
                kind, old = f[s.target]
                if kind != "local":
                    raise NameError(f"accumulate into '{s.target}', which is a let")
                f[s.target] = (kind, old + value)
            else:
                if s.target not in run.buffers:
                    raise NameError(f"'{s.target}' is not in scope")
                idx = run.index(s.target, s.indices, env)
                if run.race is not None:
                    run.race.read((s.target,) + idx)
                    run.race.write((s.target,) + idx)
                run.buffers[s.target][idx] += value
        elif isinstance(s, If):
            block(s.then if s.cond.evaluate(env) else s.orelse, env)
        elif isinstance(s, Extern):
            if run.race is not None or frames[:-1]:
                raise AssertionError(f"{s} inside a loop or block")
            args = [run.buffers[a] for a in s.args]
            for name, arg in zip(s.args, args):
                if np.isnan(arg).any():
                    raise AssertionError(f"{s} reads elements of '{name}' that no kernel wrote")
                run.counts["loads"] += arg.size
            flags = s.transposed or (False,) * len(args)
            if s.spec:  # contract(A[...], B[...]): the interpreter's einsum
                run.buffers[s.out][...] = einsum_contract(s.spec, *args)
                return
            run.buffers[s.out][...] = matrix_function(s.fn, *(np.swapaxes(a, -1, -2) if t else a for a, t in zip(args, flags)))
        else:  # pragma: no cover
            raise TypeError(s)

    block(body, env)
