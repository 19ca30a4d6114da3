"""Run-time validation of index inputs (``index tok[n] < v``).

Compiled code reads ``emb[tok[i], j]`` without a bounds check: the prover
showed it in bounds *given* the declared range of ``tok``'s entries, so that
range is a promise the caller makes, and every call -- compiled or
interpreted -- checks it on entry, before any kernel runs, on a private
copy that the kernels then read.  A row pointer (consecutive entries
bounding a sum, ``sum[k: ptr[i]..ptr[i + 1] - 1]``) must also be
nondecreasing along the axis it steps along: out-of-order CSR row pointers
would not read out of bounds (the prover does not need it), but they would
silently drop non-zeros, so they are refused as the data error they are.

Index inputs must hold integers (any NumPy integer dtype: int32 and int64
alike, unsigned too; booleans and floats are refused); they are passed to
compiled code as C-contiguous int64.  A violation is a
:class:`~tcc.backends.target.CallError` naming the array, the position and
the value.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping

import numpy as np

from tcc.backends.counting_sort import place_stable
from tcc.backends.target import CallError
from tcc.ir.diagnostics import TccError
from tcc.ir.expr import RANGED, postorder
from tcc.ir.index import format_affine, lookups
from tcc.ir.program import Program, TensorDecl

__all__ = ["sum_bound_arrays", "check_index_input", "check_index_inputs", "random_index_inputs", "derive_index_arrays",
           "inverse_index"]


def sum_bound_arrays(program: Program) -> dict[str, frozenset[int]]:
    """Row-pointer index arrays and the axes along which they must be nondecreasing.

    An array is a row pointer along axis ``a`` where a sum's (or max/min
    reduction's) range runs from one of its entries to the next along ``a``,
    ``sum[k: P[.., e, ..]..P[.., e + 1, ..] - 1]`` (CSR's ``ptr[i]..ptr[i + 1] - 1``),
    or where the program derives ``rows(P)`` (axis 0).  Out of order, such
    pointers would silently drop non-zeros, so the call refuses them.  Arrays
    read in bounds otherwise (separate start and stop arrays) need no order:
    a range that is empty sums to 0.
    """
    out: dict[str, set[int]] = {}
    for d in program.derived_inputs():
        if d.derived[0] == "rows":  # type: ignore[index]
            out.setdefault(d.derived[1], set()).add(0)  # type: ignore[index]
    for d in program.definitions:
        for node in postorder(d.body):
            if not isinstance(node, RANGED):
                continue
            for start in (lk for lo in node.lo for lk in lookups(lo)):
                for stop in (lk for hi in node.hi for lk in lookups(hi)):
                    axis = _next_entry_axis(start, stop)
                    if axis is not None:
                        out.setdefault(start.tensor, set()).add(axis)
    return {name: frozenset(axes) for name, axes in out.items()}


def _next_entry_axis(start: Any, stop: Any) -> int | None:
    """The axis ``a`` where ``stop`` reads the entry after ``start``'s (same array, indices equal but
    ``stop``'s is ``start``'s + 1 at ``a``), else ``None``."""
    if start.tensor != stop.tensor or len(start.indices) != len(stop.indices):
        return None
    differ = [a for a, (x, y) in enumerate(zip(start.indices, stop.indices)) if x != y]
    if len(differ) != 1:
        return None
    step = stop.indices[differ[0]] - start.indices[differ[0]]
    return differ[0] if step.is_constant and step.const == 1 else None


def _at(name: str, pos: tuple[int, ...]) -> str:
    return f"{name}[{', '.join(str(p) for p in pos)}]"


def check_index_input(decl: TensorDecl, value: Any, sizes: Mapping[str, int],
                      monotone: frozenset[int] = frozenset()) -> np.ndarray:
    """``value`` as a C-contiguous int64 array, or a CallError saying which entry breaks the declaration."""
    # a private copy, validated and then used: a caller that changes its array later -- even while the
    # call runs, from another thread -- cannot reach the kernels or the cache with an unchecked entry;
    # np.asarray also takes a subclass by its raw data (a masked array's masked entries are entries)
    arr = np.array(np.asarray(value), order="C", copy=True)
    if arr.size == 0 and not isinstance(value, np.ndarray):
        arr = arr.astype(np.int64)  # an empty list has no integer to show: NumPy calls it float64
    if arr.dtype.kind not in "iu":
        raise CallError(f"index input '{decl.name}' must be an integer array (int64 or int32), got dtype {arr.dtype}")
    op, bound = decl.bound  # type: ignore[misc]
    hi = int(decl.index_hi.evaluate(sizes))
    text = f"{op} {format_affine(bound)}" + ("" if bound.is_constant else f" = {int(bound.evaluate(sizes))}")
    bad = (arr < 0) | (arr > hi)
    if bad.any():
        pos = tuple(int(p) for p in np.argwhere(bad)[0])
        raise CallError(f"index input '{decl.name}' has {_at(decl.name, pos)} = {int(arr[pos])}, outside its declared "
                        f"range 0..{hi} ({decl.name} {text})")
    out = arr.astype(np.int64, copy=False)
    for axis in sorted(monotone):
        if out.shape[axis] < 2:
            continue
        down = np.diff(out, axis=axis) < 0
        if down.any():
            pos = tuple(int(p) for p in np.argwhere(down)[0])
            nxt = pos[:axis] + (pos[axis] + 1,) + pos[axis + 1:]
            along = "its last axis" if axis == out.ndim - 1 else f"axis {axis}"
            raise CallError(f"index input '{decl.name}' bounds a sum, so it must be nondecreasing along {along}, "
                            f"but {_at(decl.name, pos)} = {int(out[pos])} > {_at(decl.name, nxt)} = {int(out[nxt])}")
    return out


def check_index_inputs(program: Program, arrays: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Every index input of ``program`` checked (:func:`check_index_input`), by name, and the
    index arrays the program derives from them (:func:`derive_index_arrays`) added."""
    monotone = sum_bound_arrays(program)
    out = {d.name: check_index_input(d, arrays[d.name], sizes, monotone.get(d.name, frozenset()))
           for d in program.index_inputs()}
    return derive_index_arrays(program, out, sizes)


def inverse_index(src: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ptr, perm)`` of a validated 1-D array with entries in ``0..h``: a counting sort, O(n + h).

    ``ptr`` holds the counts' prefix sums (``bincount``, ``cumsum``);
    ``perm[ptr[w]..ptr[w + 1] - 1]`` are the positions holding ``w``,
    increasing, placed by a native loop (:func:`tcc.backends.counting_sort.place_stable`):
    NumPy's stable argsort is O(n log n) above 16-bit keys and cost 20x the kernels it served.
    """
    counts = np.bincount(src, minlength=h + 1)[: h + 1] if src.size else np.zeros(h + 1, np.int64)
    ptr = np.zeros(h + 2, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, place_stable(src, ptr[:-1])


def rows_of(ptr: np.ndarray, h: int) -> np.ndarray:
    """``row[k]`` for ``k`` in ``0..h - 1``: the ``i`` with ``ptr[i] <= k < ptr[i + 1]``, or ``m`` (no row).

    ``ptr`` is nondecreasing (validated), so the rows are runs: one ``np.repeat``,
    O(h + m), where a binary search per entry cost O(h log m).
    """
    m = ptr.shape[0] - 1
    row = np.full(h, m, dtype=np.int64)
    if m > 0:
        lo, hi = int(ptr[0]), int(ptr[m])
        row[lo:hi] = np.repeat(np.arange(m, dtype=np.int64), np.diff(ptr))
    return row


def derive_index_arrays(program: Program, arrays: dict[str, np.ndarray], sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """``arrays`` with every derived index array (``= inverse_ptr(tok)``, ...) computed, in declaration
    order (one may derive from another), once per call: every kernel that needs one reads the same array."""
    inverses: dict[str, tuple[np.ndarray, np.ndarray]] = {}   # inverse_ptr and inverse_perm of one array: one sort
    for d in program.derived_inputs():
        fn, name = d.derived  # type: ignore[misc]
        src = arrays[name]
        h = int(program.input(name).index_hi.evaluate(sizes))  # type: ignore[union-attr]
        if fn == "rows":
            arrays[d.name] = rows_of(src, h)
            continue
        if name not in inverses:
            inverses[name] = inverse_index(src, h)
        arrays[d.name] = inverses[name][fn == "inverse_perm"]
    return arrays


def random_index_inputs(program: Program, sizes: Mapping[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Valid random entries for every index input (finite-difference checks, tests): uniform in the
    declared range, sorted (as one flat sequence) where the array is a row pointer (:func:`sum_bound_arrays`)."""
    monotone = sum_bound_arrays(program)
    out: dict[str, np.ndarray] = {}
    for d in program.index_inputs():
        shape = tuple(int(e.evaluate(sizes)) for e in d.extents)
        hi = int(d.index_hi.evaluate(sizes))
        if hi < 0 and int(np.prod(shape)):
            raise TccError(f"no valid entries for index input '{d.name}' at these sizes: it has {int(np.prod(shape))} "
                           f"entries, which must lie in 0..{hi}")
        arr = rng.integers(0, max(hi, 0) + 1, size=shape, dtype=np.int64)
        # sorted as one flat sequence: then every axis is nondecreasing, whichever the program steps along
        out[d.name] = np.sort(arr, axis=None).reshape(shape) if monotone.get(d.name) else arr
    return out


class IndexCache:
    """The last call's validated and derived index arrays, reused by a call whose index inputs are equal.

    Validation and the inverse indices cost O(n) per call -- at 10**6 entries
    several times the gather kernels they serve -- while the index arrays of
    many workloads do not change between calls (a sparse matrix's structure,
    a graph's edges).  A compiled program keeps its own copy of the last
    call's index inputs; a call whose index inputs are element-wise equal at
    the same sizes reuses the validated arrays and the derived ones instead
    of building them again.  Equality is checked in full (a strided sample
    first, so that changed tokens fail fast): O(n) reads with no sort and
    no scatter, and never a stale inverse.  The cost is one copy of the index
    inputs per compiled program.
    """

    SAMPLE = 4096          # stride of the quick comparison before the full one

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[tuple[tuple[str, int], ...], dict[str, np.ndarray]] | None = None

    def check(self, program: Program, arrays: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
        """:func:`check_index_inputs` of the call, or the last call's result when its index inputs are equal."""
        names = [d.name for d in program.index_inputs()]
        if not names:
            return {}
        key = tuple(sorted(sizes.items()))
        with self._lock:
            last = self._last
        if last is not None and last[0] == key and all(_equal(arrays[n], last[1][n]) for n in names):
            return dict(last[1])
        out = check_index_inputs(program, arrays, sizes)
        with self._lock:  # the validated arrays are private copies (check_index_input): later changes cannot reach them
            self._last = (key, out)
        return dict(out)


def _equal(given: Any, kept: np.ndarray) -> bool:
    arr = given if isinstance(given, np.ndarray) else np.asarray(given)
    if arr.shape != kept.shape or arr.dtype.kind not in "iu":
        return False
    flat, flat_kept = arr.reshape(-1), kept.reshape(-1)
    step = IndexCache.SAMPLE
    return bool(np.array_equal(flat[::step], flat_kept[::step]) and np.array_equal(flat, flat_kept))
