"""Binding size names from the shapes of input arrays.

A program declares its inputs with extents that are affine in *size names*
(``input x[n]``, ``input w[m]``, ``input p[n - 1]``, ``input q[2*n]``).  At
call time the arrays fix those names: each dimension whose extent, after the
already-bound names are substituted, is ``c*n + k`` with a single unknown
``n`` binds ``n = (shape - k) / c`` (an exact non-negative integer).  This is
repeated until nothing more can be bound; then every input's shape is checked
against its evaluated extents and every known definition extent must be
non-negative.

Every mistake is a :class:`~tcc.diagnostics.TccError` naming the tensor.

The range of index arithmetic (:mod:`tcc.ir.index_range`, re-exported here)
---------------------------------------------------------------------------
Index expressions are integer-affine and both the interpreter and compiled
code evaluate them in 64-bit integers.  Rather than give a wrapped-around
(interpreter) or undefined (LLVM's ``nsw`` arithmetic) value where that
overflows, tcc assumes that every size and index value lies within
``+-INDEX_LIMIT`` (2**40: no extent that large can be allocated or iterated
over) -- :func:`bind_sizes` refuses larger sizes -- and rejects an index
expression whose value could then leave the 64-bit range
(:func:`check_index_range`).  Within the limit, 64-bit arithmetic is exact,
so the interpreter and every target agree.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np

from tcc.ir.diagnostics import TccError
from tcc.ir.index import Affine, format_affine, format_cond
from tcc.ir.index_range import (  # re-exported: the index range moved to ir/ (the LLVM lowering needs it too)
    INDEX_LIMIT,
    check_index_range,
    check_index_ranges,
    check_program_index_ranges,
    cond_affines,
    index_magnitude,
)
from tcc.ir.program import Program, TensorDecl

__all__ = [
    "bind_sizes", "as_input_array", "extents_shape", "format_decl", "check_allocations", "MAX_BUFFER_BYTES",
    "INDEX_LIMIT", "check_index_range", "check_index_ranges", "check_program_index_ranges", "cond_affines",
]


def format_decl(name: str, extents: tuple[Affine, ...]) -> str:
    """``a[3, n]`` (or ``s`` for a scalar), as written in the program."""
    if not extents:
        return name
    return f"{name}[{', '.join(format_affine(e) for e in extents)}]"


def as_input_array(name: str, value: Any) -> np.ndarray:
    """The value as a real numeric NumPy array (Python numbers become 0-d arrays)."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged nested lists and the like
        raise TccError(f"input '{name}' must be a numeric array ({exc})") from None
    if arr.dtype.kind not in "biuf":
        raise TccError(f"input '{name}' must be a numeric array, got dtype {arr.dtype}")
    return arr


def _input_shape(name: str, value: Any) -> tuple[int, ...]:
    """The shape an input binds sizes with.

    Binding needs shapes only, so an array that is not NumPy's but carries a
    ``shape`` and ``ndim`` (a GPU array of the CUDA runtime) is read through
    them rather than converted; anything else must convert to a numeric array.
    """
    if not isinstance(value, np.ndarray) and hasattr(value, "shape") and hasattr(value, "ndim"):
        return tuple(int(s) for s in value.shape)
    return tuple(int(s) for s in as_input_array(name, value).shape)


def extents_shape(extents: tuple[Affine, ...], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """Evaluate extents (affine in size names) to a shape of Python ints."""
    return tuple(int(e.evaluate(sizes)) for e in extents)


#: The most bytes one buffer -- and all that a call allocates together -- may take.  Compiled code
#: addresses an element with a 64-bit byte offset, and NumPy's sizes are ssize_t: past this an array
#: cannot exist (NumPy raises a bare ValueError) and its offsets would wrap around.
MAX_BUFFER_BYTES = (1 << 63) - 1


def _bytes(n: int) -> str:
    """``n`` bytes, in the largest binary unit that keeps the number at least 1."""
    value, units = float(n), ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
    unit = 0
    while value >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    return f"{n} bytes" if unit == 0 else f"{value:.3g} {units[unit]}"


def check_allocations(buffers: Iterable[tuple[str, str, tuple[int, ...], int]]) -> None:
    """Refuse a call whose buffers cannot exist, before anything is allocated or launched.

    ``buffers``: ``(kind, name, shape, itemsize)`` for every array the call
    allocates (results, locals, temporaries).  Sizes are bound from input
    shapes, and an empty input binds a size with no memory: ``x[n, m]`` given
    an array of shape ``(2**40, 0)`` makes a result ``y[n, n]`` of 2**80
    elements.  Element counts and bytes are computed with Python ints (NumPy's
    products would wrap), and each buffer, and their sum, must stay within
    :data:`MAX_BUFFER_BYTES`: that keeps every element's 64-bit offset, the
    linearised index of every in-bounds access included, exact.  A shape with
    a negative extent is left to the caller's own message.  Smaller requests
    than this that the machine cannot meet end in MemoryError (the command
    line's ``error: out of memory``).
    """
    total = 0
    for kind, name, shape, itemsize in buffers:
        if any(s < 0 for s in shape):
            continue
        count = math.prod(shape)
        nbytes = count * itemsize
        total += nbytes
        if nbytes > MAX_BUFFER_BYTES:
            raise TccError(
                f"{kind} '{name}' is too large: its shape {shape} for these sizes has {count} elements "
                f"of {itemsize} bytes ({_bytes(nbytes)}), more than can be allocated "
                f"(a buffer holds at most 2**63 - 1 bytes: compiled code addresses it with 64-bit offsets)"
            )
    if total > MAX_BUFFER_BYTES:
        raise TccError(
            f"the buffers of this call are too large: {_bytes(total)} together for these sizes, "
            f"more than can be allocated (at most 2**63 - 1 bytes)"
        )


def _single_unknown(e: Affine, bound: Mapping[str, int]) -> tuple[str, int, int] | None:
    """``(n, c, k)`` when ``e`` with ``bound`` substituted is ``c*n + k``, else None."""
    if not e.is_linear:
        return None
    unknown = [(a, c) for a, c in e.terms if a not in bound]
    if len(unknown) != 1:
        return None
    name, coeff = unknown[0]
    k = e.const + sum(c * bound[a] for a, c in e.terms if a in bound)
    return str(name), coeff, k


def bind_sizes(program: Program, arrays: Mapping[str, Any]) -> dict[str, int]:
    """Size name -> value, from the shapes of ``arrays`` (extra arrays are ignored).

    Raises TccError for a missing or non-numeric input, a wrong number of
    dimensions, a shape that contradicts a declaration, conflicting or
    undeterminable sizes, and a definition extent that would be negative.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for decl in program.caller_inputs():
        if decl.name not in arrays:
            raise TccError(f"missing input '{decl.name}'")
        shape = _input_shape(decl.name, arrays[decl.name])
        if len(shape) != len(decl.extents):
            raise TccError(
                f"input '{decl.name}' must have {len(decl.extents)} dimensions "
                f"({format_decl(decl.name, decl.extents)}), got {len(shape)}"
            )
        shapes[decl.name] = shape

    sizes: dict[str, int] = {}
    bound_by: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for decl in program.caller_inputs():
            for axis, e in enumerate(decl.extents):
                solved = _single_unknown(e, sizes)
                if solved is None:
                    continue
                name, c, k = solved
                length = shapes[decl.name][axis]
                value, rem = divmod(length - k, c)
                if rem or value < 0:
                    raise TccError(
                        f"input '{decl.name}' has shape {shapes[decl.name]} but no size {name} >= 0 "
                        f"makes extent {format_affine(e)} of its declaration "
                        f"{format_decl(decl.name, decl.extents)} equal {length}"
                    )
                sizes[name] = value
                bound_by[name] = decl.name
                changed = True

    for name in program.sizes():
        if name not in sizes:
            raise TccError(f"size '{name}' cannot be determined from the inputs")
        if sizes[name] > INDEX_LIMIT:
            raise TccError(
                f"size '{name}' = {sizes[name]} (bound by '{bound_by[name]}') is larger than 2**40, "
                f"the largest size tcc's 64-bit index arithmetic allows"
            )

    for decl in program.caller_inputs():
        _check_shape(decl, shapes[decl.name], sizes, bound_by)

    for a in getattr(program, "assumptions", ()):
        if not a.cond.evaluate(sizes):
            values = ", ".join(f"{n} = {sizes[n]}" for n in a.cond.names())
            raise TccError(f"these sizes violate 'assume {format_cond(a.cond)}' ({values})", a.loc, program.source)

    for d in program.definitions:
        if d.extents is None:
            continue
        for e in d.extents:
            missing = [n for n in e.names() if n not in sizes]
            if missing:
                raise TccError(
                    f"size '{missing[0]}' in the extents of definition '{d.name}' "
                    f"cannot be determined from the inputs"
                )
            v = int(e.evaluate(sizes))
            if v < 0:
                raise TccError(
                    f"definition '{d.name}' would have negative extent {v} ({format_affine(e)}) for these sizes"
                )
    return {n: sizes[n] for n in program.sizes()}


def _check_shape(decl: TensorDecl, shape: tuple[int, ...], sizes: Mapping[str, int], bound_by: Mapping[str, str]) -> None:
    want = extents_shape(decl.extents, sizes)
    if want == shape:
        return
    # A single-size extent that disagrees names the conflicting binding when
    # the size was bound by another tensor.
    for axis, e in enumerate(decl.extents):
        if want[axis] == shape[axis] or not e.is_linear or len(e.terms) != 1:
            continue
        (name, c), = e.terms
        if bound_by.get(name, decl.name) == decl.name:
            continue
        implied, rem = divmod(shape[axis] - e.const, c)
        if rem == 0 and implied >= 0:
            raise TccError(
                f"size '{name}' is bound to {sizes[name]} by '{bound_by[name]}' "
                f"but '{decl.name}' implies {implied}"
            )
    raise TccError(
        f"input '{decl.name}' has shape {shape} but its declaration "
        f"{format_decl(decl.name, decl.extents)} requires {want}"
    )
