"""Reference interpreter for L1 programs, vectorised with NumPy.

Every compiled kernel and every pass is checked against this module, so it
favours being obviously right over being fast -- but it must still handle
grids of about a million points in well under a second.

How a definition ``f[i, j] = body`` is evaluated
-------------------------------------------------
* The left-hand indices form a *grid*: ``i`` is ``arange(extent0)`` along
  axis 0, ``j`` is ``arange(extent1)`` along axis 1, broadcast against each
  other.  Large grids are cut into blocks of rows of the first axis.
* Each ``sum[k: lo..hi]`` adds a **leading** axis for the offset
  ``t = k - lo`` (lo and hi may depend on enclosing indices, so ``k = lo + t``
  is an array over the enclosing points), long enough for the widest range
  among the active points; lanes past each point's own ``hi`` are masked off
  and the axis is summed away.  Because new axes are leading, arrays of
  enclosing indices broadcast unchanged and a subexpression that does not
  mention ``k`` stays small.  The sum axis is processed in blocks so that no
  intermediate exceeds ``max_block`` elements.
* Every reduction has one evaluation order: its terms are added (maxed)
  into one accumulator from 0 (-inf, +inf) in order of the summed index,
  as the compiled loop does, vectorised across the enclosing points only
  (:func:`_fold`).  So a value is bit-identical whatever the block size or
  the grid it is evaluated in, and a derivative that compares a recomputed
  value with a stored one (the tie test of ``max``) finds it equal.
* An explicit boolean *active* mask is carried along: ``where`` conditions and
  sum ranges narrow it.  Accesses in inactive lanes read clamped indices (so a
  guarded ``where(i >= 1, x[i - 1], 0)`` is fine), but an **active** lane that
  reads out of bounds raises :class:`RuntimeError` -- a compiler-bug detector
  for later passes, so it is exact.  Branches are combined with ``np.where``,
  never by multiplying with 0/1, and floating-point warnings are suppressed
  (values in inactive lanes are garbage by design).
* Values are arrays of the requested float dtype (int constants too).
* Within one scope (one block of the grid and of every enclosing sum) each
  shared DAG node (one with several parents) is evaluated once per active
  mask: nodes are hash-consed, so ``(id(node), id(mask))`` is a valid memo
  key.  Unshared nodes are not kept, which bounds memory.

Matrix functions
----------------
A definition whose body is a matrix function (``B[i, j] = inv(A)[i, j]``,
``s = det(A)``) is not element-wise: it is computed from the whole argument
by :func:`matrix_function` (LAPACK through ``numpy.linalg``), the same code
the compiled runtime runs for its external kernels.

Public API: :func:`evaluate` (a whole program), :func:`evaluate_expr`
(one expression over an explicit grid) and :func:`matrix_function`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tcc.ir.diagnostics import TccError
from tcc.ir.user_functions import Call
from tcc.ir.expr import INDEX_VALUE, Access, Binary, Reduce, Select, Const, CSum, Expr, MatrixFn, Step, Sum, Unary, Where, postorder, trampoline
from tcc.ir.index import LOOKUP_ENV, Affine, format_affine
from tcc.ir.program import Program

from tcc.index_inputs import check_index_inputs
from tcc.runtime.externs.matrix_functions import einsum_contract, matrix_function
from tcc.sizes import as_input_array, bind_sizes, check_allocations, check_index_range, check_index_ranges, cond_affines, extents_shape

__all__ = ["evaluate", "evaluate_expr", "MAX_BLOCK"]

#: No intermediate array of a grid block is larger than this many elements.
MAX_BLOCK = 1 << 20


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-|x|) never overflows; both branches share it.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "abs": np.abs,
    "sign": np.sign,
    "relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "sigmoid": _sigmoid,
}


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """IEEE 754 / C99 ``pow`` for every exponent, as compiled code computes it.

    ``np.power`` takes a shortcut through ``sqrt`` when the exponent is a
    broadcast 0.5 (a constant or a scalar input) but calls ``pow`` when the
    same 0.5 varies along an axis, and the two disagree exactly at ``-0``
    (``sqrt`` gives -0, ``pow`` +0) and ``-inf`` (NaN against +inf).  The
    language's ``x**y`` is ``pow`` wherever it is written, so those two
    points are set to ``pow``'s values.  (NumPy's other shortcuts -- the
    exponents -1, 0, 1, 2 -- agree with ``pow``.)
    """
    out = np.power(x, y)
    half = y == 0.5
    if np.any(half):
        out = np.where(half & (x == 0), np.zeros((), out.dtype), out)
        out = np.where(half & (x == -np.inf), np.asarray(np.inf, out.dtype), out)
    return out


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.divide,
    "**": _pow,
    "max": np.maximum,  # NaN propagates; at a tie (-0 and +0) the second argument, as in compiled code
    "min": np.minimum,
}

#: value comparisons of ``where``: IEEE (NaN compares false, except ``!=``)
_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
}


#: the operation each reduction folds its terms with
_FOLD: dict[str, np.ufunc] = {"sum": np.add, "max": np.maximum, "min": np.minimum}

#: a fold across at least this many lanes steps through the summed index in
#: Python (one vector operation per term); a narrower one runs ``accumulate``,
#: which is slower per element but has no per-term overhead.  Both give the same bits.
_LOOP_LANES = 256


def _fold(op: np.ufunc, terms: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """``op(...op(op(acc, terms[0]), terms[1])..., terms[-1])`` lane by lane: axis 0 left to right.

    This is the one evaluation order of every reduction of the interpreter,
    the order of the compiled loop ``acc = acc + term`` (``max(acc, term)``)
    from 0 (-inf, +inf).  NumPy's own ``sum`` is not usable here: along a
    contiguous axis it adds pairwise, along another one sequentially, so the
    rounding of one sum would depend on the shape of the grid block it is
    evaluated in (a block of one point makes the summed axis contiguous) and
    on how the summed axis is cut into blocks.  Then a value recomputed in a
    derivative (``where(sum[k](...) == y[i], ...)``, the tie test of a
    ``max``) differs from the stored one in its last bit, loses its term, and
    a tie count of 0 makes the derivative NaN.  ``accumulate`` and a Python
    loop over axis 0 are both strictly sequential, so they agree bit for bit.
    """
    n = terms.shape[0]
    lanes = terms.size // max(1, n)
    if n == 1 or lanes >= _LOOP_LANES:
        for row in terms:
            acc = op(acc, row)
        return np.asarray(acc)
    seq = np.empty((n + 1,) + np.broadcast_shapes(np.shape(acc), terms.shape[1:]), terms.dtype)
    seq[0] = acc
    seq[1:] = terms
    return op.accumulate(seq, axis=0, out=seq)[-1]


@dataclass
class _Scope:
    """Index names in scope and the shape of the grid block they span.

    ``env`` maps index names to integer arrays broadcastable to ``shape`` (and
    size names to ints); ``memo`` caches node values within this scope.
    """

    env: dict[str, Any]
    shape: tuple[int, ...]
    memo: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def points(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class _Evaluator:
    def __init__(self, tensors: Mapping[str, np.ndarray], dtype: Any, max_block: int, where: str):
        self.tensors = tensors
        self.dtype = np.dtype(dtype)
        self.max_block = max(1, int(max_block))
        self.where = where  # "definition 'f'", for messages
        self.zero = np.zeros((), self.dtype)
        self.csums: dict[int, tuple[CSum, Expr]] = {}
        self.shared: set[int] = set()  # ids of nodes with several parents: the ones worth memoising
        self.checked: set[Affine] = set()  # index expressions whose int64 evaluation is known exact
        self.lookups: dict[str, Callable[[list], np.ndarray]] = {}  # "#tok" -> reads of index input tok

    # -- dispatch -------------------------------------------------------
    # Evaluation steps are generators run by ``trampoline``: a step yields the
    # steps of the children it needs instead of calling them, so a flat sum
    # of 100,000 terms (a tree 100,000 levels deep) needs no deep recursion.
    def ev(self, node: Expr, sc: _Scope, active: np.ndarray) -> np.ndarray:
        return trampoline(self.step(node, sc, active))

    def step(self, node: Expr, sc: _Scope, active: np.ndarray) -> Step:
        if id(node) not in self.shared:
            return (yield self._ev(node, sc, active))
        key = (id(node), id(active))
        hit = sc.memo.get(key)
        if hit is not None:
            return hit[1]
        value = yield self._ev(node, sc, active)
        sc.memo[key] = (active, value)  # keeping `active` alive keeps its id unique
        return value

    def _ev(self, node: Expr, sc: _Scope, active: np.ndarray) -> Step:
        if isinstance(node, Const):
            return np.asarray(node.value, dtype=self.dtype)
        if isinstance(node, Access):
            return self.access(node, sc, active)
        if isinstance(node, Unary):
            fn = _UNARY.get(node.op)
            if fn is None:
                raise TccError(f"unknown function '{node.op}' in {self.where}")
            return np.asarray(fn((yield self.step(node.operand, sc, active))), dtype=self.dtype)
        if isinstance(node, Binary):
            fn = _BINARY.get(node.op)
            if fn is None:
                raise TccError(f"unknown operator '{node.op}' in {self.where}")
            lhs = yield self.step(node.lhs, sc, active)
            rhs = yield self.step(node.rhs, sc, active)
            return np.asarray(fn(lhs, rhs), dtype=self.dtype)
        if isinstance(node, Call):  # a user function with custom derivatives: its body
            return (yield self.step(node.value(), sc, active))
        if isinstance(node, Select):  # eager: every operand is in bounds
            lhs = yield self.step(node.lhs, sc, active)
            rhs = yield self.step(node.rhs, sc, active)
            then = yield self.step(node.then, sc, active)
            other = yield self.step(node.other, sc, active)
            return np.asarray(np.where(_COMPARE[node.op](lhs, rhs), then, other), dtype=self.dtype)
        if isinstance(node, Where):
            return (yield self.where_(node, sc, active))
        if isinstance(node, (Sum, Reduce)):
            return (yield self.sum(node, sc, active))
        if isinstance(node, CSum):
            return (yield self.step(self.lower_csum(node), sc, active))
        if isinstance(node, MatrixFn):
            raise TccError(f"{node} in {self.where} is not element-wise: only a whole definition can be one")
        raise TypeError(f"cannot evaluate {type(node).__name__}")

    # -- index expressions ------------------------------------------------
    def index(self, e: Affine, sc: _Scope) -> Any:
        self.check_range(e)
        try:
            return e.evaluate(sc.env)
        except KeyError as exc:
            raise TccError(f"index name '{exc.args[0]}' is not bound in {self.where}") from None

    def check_range(self, e: Affine) -> None:
        """int64 evaluation of ``e`` is exact (checked once per expression; see tcc.sizes)."""
        if e not in self.checked:
            check_index_range(e, self.where)
            self.checked.add(e)

    def cond(self, c: Any, sc: _Scope) -> np.ndarray:
        for e in cond_affines(c):
            self.check_range(e)
        try:
            return np.asarray(c.evaluate(sc.env), dtype=bool)
        except KeyError as exc:
            raise TccError(f"index name '{exc.args[0]}' is not bound in {self.where}") from None

    # -- nodes ------------------------------------------------------------
    def access(self, node: Access, sc: _Scope, active: np.ndarray) -> np.ndarray:
        if node.tensor == INDEX_VALUE:  # an index or size as a value: its integer, converted exactly as C does
            return np.asarray(self.index(node.indices[0], sc), dtype=np.int64).astype(self.dtype)
        arr = self.tensors.get(node.tensor)
        if arr is None:
            raise TccError(f"{self.where} reads '{node.tensor}', which is not an input or an earlier definition")
        if arr.ndim != len(node.indices):
            raise TccError(
                f"{self.where} accesses '{node.tensor}' with {len(node.indices)} indices "
                f"but it has {arr.ndim} dimensions"
            )
        if not node.indices:
            return arr
        idx = [np.asarray(self.index(e, sc)) for e in node.indices]
        outside = np.zeros((), dtype=bool)
        for i, n in zip(idx, arr.shape):
            outside = outside | (i < 0) | (i >= n)
        if outside.any():
            bad = outside & active
            if bad.any():
                self.report_oob(node, sc, idx, bad, arr.shape)
            if arr.size == 0:  # nothing to read, and no active lane reads it
                return np.zeros(np.broadcast_shapes(*(i.shape for i in idx)), self.dtype)
            idx = [np.clip(i, 0, n - 1) for i, n in zip(idx, arr.shape)]
        return np.asarray(arr[tuple(idx)])

    def report_oob(self, node: Access, sc: _Scope, idx: list, bad: np.ndarray, shape: tuple) -> None:
        bad = np.broadcast_to(bad, np.broadcast_shapes(bad.shape, sc.shape))
        pos = tuple(int(p) for p in np.argwhere(bad)[0])

        def at(v: Any) -> int:
            return int(np.broadcast_to(np.asarray(v), bad.shape)[pos])

        point = ", ".join(f"{k}={at(v)}" for k, v in sc.env.items() if isinstance(v, np.ndarray))
        sizes = ", ".join(f"{k}={v}" for k, v in sc.env.items() if not isinstance(v, np.ndarray) and k[:1] != LOOKUP_ENV)
        indices = ", ".join(str(at(i)) for i in idx)
        text = f"{node.tensor}[{', '.join(format_affine(e) for e in node.indices)}]"
        raise RuntimeError(
            f"out-of-bounds read {text} in {self.where}: index [{indices}] outside shape {tuple(shape)} "
            f"at {point or 'the scalar point'}" + (f" (sizes {sizes})" if sizes else "")
        )

    def where_(self, node: Where, sc: _Scope, active: np.ndarray) -> Step:
        c = self.cond(node.cond, sc)
        on = active & c
        off = active & ~c
        any_on, any_off = bool(on.any()), bool(off.any())
        # When one branch has no active lane, the other one's active lanes
        # are exactly `active`: reuse it (more memo hits, same checks).
        if not any_off:
            return (yield self.step(node.then, sc, active)) if any_on else self.zero
        if not any_on:
            return (yield self.step(node.other, sc, active))
        then = yield self.step(node.then, sc, on)
        other = yield self.step(node.other, sc, off)
        return np.where(c, then, other)

    def sum(self, node: Sum | Reduce, sc: _Scope, active: np.ndarray) -> Step:
        """A sum, or a max/min reduction (its identity -inf/+inf for an empty range; NaN propagates)."""
        if not node.has_range:
            raise TccError(f"sum over '{node.var}' in {self.where} has no range; run infer-ranges first")
        kind = node.op if isinstance(node, Reduce) else "sum"
        identity = {"sum": self.zero, "max": np.asarray(-np.inf, self.dtype), "min": np.asarray(np.inf, self.dtype)}[kind]
        lo = self.index(node.lo[0], sc)
        for b in node.lo[1:]:
            lo = np.maximum(lo, self.index(b, sc))
        hi = self.index(node.hi[0], sc)
        for b in node.hi[1:]:
            hi = np.minimum(hi, self.index(b, sc))
        lo, hi = np.asarray(lo), np.asarray(hi)
        live = active & (lo <= hi)
        if not live.any():
            return identity
        # The sum axis runs over offsets t = k - lo(point), so a band whose
        # bounds slide with an outer index costs its width, not the union of
        # all its ranges.
        width = hi - lo
        tmax = int(np.broadcast_to(width, live.shape)[live].max())
        step = max(1, self.max_block // max(1, sc.points))
        lead = (1,) * len(sc.shape)
        # every block of the sum axis continues one accumulator (see _fold): the
        # result does not depend on the blocking or on the shape of the grid block
        op = _FOLD[kind]
        total = identity
        for t0 in range(0, tmax + 1, step):
            t = np.arange(t0, min(t0 + step, tmax + 1), dtype=np.int64).reshape((-1,) + lead)
            act = live & (t <= width)
            if not act.any():
                continue
            inner = _Scope({**sc.env, node.var: lo + t}, (t.shape[0],) + sc.shape)
            body = yield self.step(node.body, inner, act)
            total = _fold(op, np.where(act, body, identity), total)
        return np.where(live, total, identity) if kind != "sum" else total

    def lower_csum(self, node: CSum) -> Expr:
        hit = self.csums.get(id(node))
        if hit is None:
            from tcc.ir.constrained_sums import csum_to_sums  # the polyhedral lowering owns CSum semantics

            hit = (node, csum_to_sums(node))
            self.csums[id(node)] = hit
            self.shared |= _shared_nodes(hit[1])
        return hit[1]

    # -- a whole grid -----------------------------------------------------
    def grid(self, body: Expr, names: Sequence[str], shape: tuple[int, ...], sizes: Mapping[str, int]) -> np.ndarray:
        """``body`` at every point of ``names`` spanning ``shape``: a C-contiguous array."""
        out = np.empty(shape, dtype=self.dtype)
        if out.size == 0:
            return out
        self.shared |= _shared_nodes(body)
        m = len(shape)
        rest = int(np.prod(shape[1:], dtype=np.int64)) if m else 1
        rows = max(1, self.max_block // max(1, rest)) if m else 1
        first = shape[0] if m else 1
        for r0 in range(0, first, rows):
            r1 = min(first, r0 + rows)
            env: dict[str, Any] = {**sizes, **self.lookups}
            block = (r1 - r0,) + tuple(shape[1:]) if m else ()
            for axis, name in enumerate(names):
                start = r0 if axis == 0 else 0
                ix = np.arange(start, start + block[axis], dtype=np.int64)
                env[name] = ix.reshape((1,) * axis + (-1,) + (1,) * (m - axis - 1))
            active = np.ones((1,) * m, dtype=bool)
            value = self.ev(body, _Scope(env, block), active)
            if m:
                out[r0:r1] = value
            else:
                out[()] = value
        return out


def _reader(arr: np.ndarray) -> Callable[[list], np.ndarray]:
    """Reads of a (validated) index input at broadcast positions, for :meth:`tcc.ir.index.Lookup.evaluate`.

    Positions outside the array are clamped: only inactive lanes (a sum
    axis past its point's range, an untaken where branch) compute them, and
    the prover guarantees the active ones (the checks of ``access`` are for
    value reads, whose positions may come from these entries).
    """
    def read(idx: list) -> np.ndarray:
        idx = [np.asarray(i, dtype=np.int64) for i in idx]
        if arr.size == 0:
            return np.zeros(np.broadcast_shapes(*(i.shape for i in idx)), dtype=np.int64)
        return arr[tuple(np.clip(i, 0, n - 1) for i, n in zip(idx, arr.shape))]

    return read


def _shared_nodes(root: Expr) -> set[int]:
    """Ids of the nodes of the DAG that have more than one parent (or use)."""
    uses: dict[int, int] = {}
    for node in postorder(root):
        for child in node.children():
            uses[id(child)] = uses.get(id(child), 0) + 1
    return {k for k, n in uses.items() if n > 1}


def _check_ranged(body: Expr, where: str) -> None:
    """Every sum has a range, and every index expression evaluates exactly in int64.

    The index check covers the whole body before anything runs, not only the
    points evaluated, so that the interpreter rejects exactly the programs
    the compiler rejects (an index expression in an empty sum included).
    """
    for node in postorder(body):
        if isinstance(node, Sum) and not node.has_range:
            raise TccError(f"sum over '{node.var}' in {where} has no range; run infer-ranges first")
    check_index_ranges(body, where)


def evaluate(
    program: Program,
    inputs: Mapping[str, Any],
    dtype: Any = np.float64,
    *,
    max_block: int = MAX_BLOCK,
) -> dict[str, np.ndarray]:
    """Every definition of ``program``, in program order, as C-contiguous ``dtype`` arrays.

    ``inputs`` maps input names to arrays (or Python numbers for scalars);
    sizes are bound from their shapes (:func:`tcc.sizes.bind_sizes`) and
    undeclared names are ignored.  A scalar definition gives a 0-d array.
    ``max_block`` bounds the number of elements of any intermediate block
    (a small value exercises the chunking).

    Raises TccError for user errors (bad inputs, unknown extents, unranged
    sums) and RuntimeError when an active lane reads out of bounds.
    """
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise TccError(f"the interpreter computes in a float dtype, not {dtype}")
    for d in program.definitions:
        if d.extents is None and d.indices:
            raise TccError(f"definition '{d.name}' has no known extents; run infer-ranges first")
        _check_ranged(d.body, f"definition '{d.name}'")
    sizes = bind_sizes(program, inputs)
    check_allocations(("result", d.name, extents_shape(d.extents or (), sizes), dtype.itemsize) for d in program.definitions)
    lookup_env = {LOOKUP_ENV + n: _reader(a) for n, a in check_index_inputs(program, inputs, sizes).items()}
    tensors: dict[str, np.ndarray] = {}
    for decl in program.inputs:
        if decl.is_index:  # integers, read only inside indices (through lookup_env)
            continue
        tensors[decl.name] = np.asarray(as_input_array(decl.name, inputs[decl.name]), dtype=dtype, order="C")
    results: dict[str, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for d in program.definitions:
            extents = () if d.extents is None else d.extents  # a scalar needs no declaration
            if len(d.indices) != len(extents):
                raise TccError(f"definition '{d.name}' has {len(d.indices)} indices but {len(extents)} extents")
            shape = extents_shape(extents, sizes)
            if isinstance(d.body, MatrixFn):
                fn, args = d.body.fn, d.body.args
                for arg in args:
                    if arg not in tensors:
                        raise TccError(f"definition '{d.name}' reads '{arg}', which is not an input or an earlier definition")
                # an argument read transposed is passed as the transposed view (matmul(A, transpose(B)): A @ B.T)
                operands = (np.swapaxes(tensors[a], -1, -2) if t else tensors[a] for a, t in zip(args, d.body.transposed))
                if d.body.spec:  # contract(A[z, a], B[z, b]): NumPy's einsum, independent of the runtime's plan
                    value = np.array(einsum_contract(d.body.spec, *operands), dtype=dtype, order="C")
                else:
                    value = np.array(
                        matrix_function(fn, *operands, where=f"definition '{d.name}'"), dtype=dtype, order="C"
                    )
                if value.shape != shape:
                    raise TccError(f"definition '{d.name}' has shape {shape} but {d.body} has shape {value.shape}")
                results[d.name] = value
                tensors[d.name] = value
                continue
            ev = _Evaluator(tensors, dtype, max_block, f"definition '{d.name}'")
            ev.lookups = lookup_env
            value = ev.grid(d.body, d.indices, shape, sizes)
            results[d.name] = value
            tensors[d.name] = value
    return results


def evaluate_expr(
    expr: Expr,
    tensors: Mapping[str, Any],
    grid: Mapping[str, int] | Sequence[tuple[str, int]] = (),
    sizes: Mapping[str, int] | None = None,
    dtype: Any = np.float64,
    *,
    max_block: int = MAX_BLOCK,
) -> np.ndarray:
    """One expression over an explicit grid: ``grid`` is ``{index: extent}`` in axis order.

    ``tensors`` are the arrays the expression reads (no shape checks beyond
    the out-of-bounds detector) and ``sizes`` binds size names.  Returns an
    array of shape ``tuple(grid.values())``.
    """
    items = list(grid.items()) if isinstance(grid, Mapping) else list(grid)
    _check_ranged(expr, "the expression")
    dtype = np.dtype(dtype)
    arrays = {k: np.asarray(as_input_array(k, v), dtype=dtype, order="C") for k, v in tensors.items()}
    ev = _Evaluator(arrays, dtype, max_block, "the expression")
    with np.errstate(all="ignore"):
        return ev.grid(expr, [n for n, _ in items], tuple(int(e) for e in (x for _, x in items)), dict(sizes or {}))
