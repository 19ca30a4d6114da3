"""The data addresses of NumPy arrays, for the pointer array every compiled kernel takes.

``arr.ctypes.data`` builds a ``_ctypes`` helper object on every access:
about 2.4 us per array on the 2-core benchmark machine, 35 us for the 15
buffers of layer normalisation's gradient -- on every call, where the
call's kernels take about 1 ms.  The address is the ``data`` field of
NumPy's ``PyArrayObject_fields``, the first member after the object header
in NumPy's public C ABI (``PyArray_DATA``); read through ``ctypes`` at that
offset it costs about a third of a microsecond.

The offset is found once, at import, by comparing with ``ctypes.data`` on
probe arrays (an owner, a view into its middle, a reversed view); where no
offset agrees -- another Python build's object header, a NumPy whose layout
differs -- every address comes from ``ctypes.data`` as before.  Only exact
``np.ndarray`` instances take the fast path (a subclass may be a Python
class whose instances NumPy still lays out the same way, but nothing is
gained by assuming it).
"""
from __future__ import annotations

import ctypes
from typing import Any, Iterable

import numpy as np

__all__ = ["data_address", "data_addresses"]


def _find_offset() -> int | None:
    owner = np.arange(64, dtype=np.float64)
    probes = [owner, owner[5:], owner[::-1], np.zeros((3, 4), np.float32).T]
    for offset in range(8, 129, 8):
        try:
            if all(ctypes.c_void_p.from_address(id(p) + offset).value == p.ctypes.data for p in probes):
                return offset
        except (ValueError, OverflowError):  # pragma: no cover - an address ctypes cannot read
            return None
    return None  # pragma: no cover - NumPy's public layout has data right after the header


_OFFSET = _find_offset()
_from_address = ctypes.c_void_p.from_address


def data_address(arr: Any) -> int:
    """The address of ``arr``'s first element (``arr.ctypes.data``)."""
    if _OFFSET is not None and type(arr) is np.ndarray:
        return _from_address(id(arr) + _OFFSET).value or 0
    return int(arr.ctypes.data)


def data_addresses(arrays: Iterable[Any]) -> list[int]:
    """:func:`data_address` of each array, in order."""
    return [data_address(a) for a in arrays]
