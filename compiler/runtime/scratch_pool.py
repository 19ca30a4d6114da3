"""Memory for the buffers a call does not return, kept from one call of a compiled program to the next.

A program's intermediates -- the temporaries of the L2 passes, ``blas``'s
outlined factors, and the definitions left out of ``tcc.compile(...,
results=...)`` -- are written before they are read in every call, so their
contents never carry over and the same arrays can serve the next call.
Allocating them afresh costs more than it seems: NumPy takes arrays of a
few MB straight from the operating system, whose pages are mapped, zeroed
and faulted in on first touch -- about a microsecond per 4 KiB page, 1 ms
for 4 MB, as long as a layer-normalisation kernel runs on it.  PyTorch's
and JAX's runtimes keep such memory in caching allocators for the same
reason.

Each call takes one *set* of arrays out of the pool and puts it back when it
returns, so calls from several threads at once each get their own set
(``list.pop`` and ``list.append`` are atomic); at most :data:`MAX_SETS`
sets are kept.  A pooled array whose shape no longer fits the call's sizes
is replaced.  Results are never pooled: the caller owns them.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

#: sets of intermediates kept per compiled program (one per concurrent call, up to this many)
MAX_SETS = 4


class ScratchPool:
    """Sets of NumPy arrays by buffer name, reused across calls."""

    def __init__(self) -> None:
        self._sets: list[dict[str, np.ndarray]] = []

    def take(self) -> dict[str, np.ndarray]:
        """A set to fill and use (empty when the pool has none)."""
        try:
            return self._sets.pop()
        except IndexError:
            return {}

    def give(self, arrays: dict[str, np.ndarray]) -> None:
        """Keep ``arrays`` for a later call, unless :data:`MAX_SETS` sets are kept already."""
        if arrays and len(self._sets) < MAX_SETS:
            self._sets.append(arrays)

    def clear(self) -> None:
        """Drop every kept array (their memory is freed once no call uses them)."""
        self._sets.clear()

    def __len__(self) -> int:
        return len(self._sets)


def reuse(kept: dict[str, np.ndarray], name: str, shape: tuple[int, ...], dtype: np.dtype,
          allocate: Callable[[], Any]) -> Any:
    """``kept[name]`` when it has this shape and dtype, else a new buffer from ``allocate``; NumPy
    buffers are recorded in ``kept`` to go back to the pool (other targets' placeholders are not)."""
    arr = kept.get(name)
    if arr is not None and arr.shape == shape and arr.dtype == dtype:
        return arr
    arr = allocate()
    if isinstance(arr, np.ndarray):
        kept[name] = arr
    else:
        kept.pop(name, None)
    return arr
