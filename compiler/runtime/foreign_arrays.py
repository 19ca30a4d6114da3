"""Array interchange: the arrays of other libraries as NumPy views, without copying.

    f = tcc.compile("input x[n]\\ny[i] = 2 * x[i]\\n")
    f(x=torch.arange(4.0, dtype=torch.float64))       # DLPack: a view, no copy
    f(x=array.array("d", [1, 2]), y=array.array("d", [0, 0]))   # the buffer protocol, written in place

A compiled program's kernels read and write raw host memory, so an argument
that is not a NumPy array is turned into a NumPy *view* of its memory, and
then checked exactly as a NumPy array would be (dtype, rank, C-contiguity,
writeability, aliasing): a view keeps the checks and their messages the same
whatever library the data came from, and never converts a dtype.  The
protocols, in the order they are tried:

* **DLPack** (``__dlpack__`` with ``__dlpack_device__``: PyTorch, JAX, CuPy,
  NumPy itself): ``np.from_dlpack`` shares the producer's memory.  The device
  is read first: memory on a GPU (or any device but the CPU) cannot be read by
  host kernels, and a clear error names the device rather than letting the
  producer copy it back or fail with its own message.
* ``__cuda_array_interface__`` alone (PyCUDA, Numba device arrays): GPU
  memory, refused the same way.
* ``__array_interface__``, ``__array_struct__``, ``__array__`` and the
  buffer protocol (``memoryview``, ``array.array``, ``bytearray``): through
  ``np.asarray``, which takes the first three's memory as it is.  Only
  ``__array__`` may hand back a copy (it is the object's choice), which is
  harmless for an input and fatal for an output -- results written into a
  copy are lost -- so an output must offer one of the others.

NumPy scalars and Python numbers are not taken here: the runtime's own rules
for scalar inputs apply to them (a ``complex`` or ``bool`` is refused, not
read as a 0-d array).  This module imports no backend and no array library.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tcc.backends.target import CallError

__all__ = ["ARRAY_OBJECTS", "OUTPUT_OBJECTS", "device_error", "host_array", "host_output", "off_host"]

ARRAY_OBJECTS = "an array object (__array_interface__, __array__, the buffer protocol or DLPack)"
"""What the error for an argument of an unsupported kind names, after "a NumPy array"."""

OUTPUT_OBJECTS = "an array object that shares its memory (__array_interface__, the buffer protocol or DLPack)"
"""The same for an output argument, which must be written in place: ``__array__`` alone may copy."""

_KDL_CPU = 1
_DEVICES = {
    2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCm",
    11: "ROCm host", 12: "external", 13: "CUDA managed", 14: "oneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA",
}
_CUDA_DEVICES = (2, 3, 13)


def _is_dlpack(value: Any) -> bool:
    return hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__")


def _has_buffer(value: Any) -> bool:
    if isinstance(value, (str, bytes)):  # str has none; bytes is text to np.asarray, data to nobody
        return False
    try:
        memoryview(value).release()
    except TypeError:
        return False
    return True


def _zero_copy_protocol(value: Any) -> bool:
    """Whether ``np.asarray(value)`` is a view of ``value``'s memory by the protocol itself."""
    return hasattr(value, "__array_interface__") or hasattr(value, "__array_struct__") or _has_buffer(value)


def off_host(value: Any) -> tuple[str, bool] | None:
    """Where ``value``'s memory is when that is not the host: (the device in words, whether it is CUDA's).

    None when it is on the host or does not say (then it is no device array).
    """
    if _is_dlpack(value):
        try:
            kind, ident = value.__dlpack_device__()
            if kind == _KDL_CPU:  # the common case first: an IntEnum compares as its int
                return None
            kind, ident = int(kind), int(ident)
        except Exception as exc:  # noqa: BLE001 - a producer's own failure, reported in words
            return f"a device it does not name (__dlpack_device__ gave {exc!r})", False
        name = _DEVICES.get(kind, "non-CPU")
        return f"a {name} device ({type(value).__name__} on DLPack device ({kind}, {ident}))", kind in _CUDA_DEVICES
    if hasattr(value, "__cuda_array_interface__"):
        return f"a CUDA device ({type(value).__name__} with __cuda_array_interface__)", True
    return None


def device_error(what: str, value: Any) -> CallError | None:
    """The error for an argument whose memory is not on the host (None when it is).

    A CUDA device is pointed at ``target='cuda'``, which takes such arrays
    (``__cuda_array_interface__``); any other device can only be copied back.
    """
    where = off_host(value)
    if where is None:
        return None
    device, cuda = where
    fix = "compile with target='cuda' to pass GPU arrays, or copy it to the CPU" if cuda else "copy it to the CPU"
    return CallError(f"{what} is on {device}, but this program reads host memory: {fix}")


def host_array(what: str, value: Any) -> np.ndarray | None:
    """``value`` as a NumPy array sharing its memory, or None if it offers no array protocol.

    ``what`` names the argument in errors (``input 'x'``).  Nothing is
    converted: the caller checks the dtype and layout of the view.  A
    producer's own refusal (a tensor that requires grad, a dtype NumPy has
    not) becomes a CallError that names the argument and keeps the reason.
    """
    if isinstance(value, (np.generic, str)):
        return None
    error = device_error(what, value)
    if error is not None:
        raise error
    if _is_dlpack(value):
        return _convert(what, "DLPack", np.from_dlpack, value)
    if hasattr(value, "__array__") or hasattr(value, "__array_interface__") or hasattr(value, "__array_struct__"):
        return _convert(what, "NumPy's array protocol", np.asarray, value)
    if _has_buffer(value):
        return _convert(what, "the buffer protocol", lambda v: np.asarray(memoryview(v)), value)
    return None


def host_output(what: str, value: Any) -> np.ndarray | None:
    """An output argument as a NumPy view of its memory, to be written in place; None if it offers none.

    An object that offers only ``__array__`` is refused: its result may be a
    copy, and what the kernels wrote into it would never reach the object.
    """
    if (not isinstance(value, np.generic) and hasattr(value, "__array__") and not _is_dlpack(value)
            and not _zero_copy_protocol(value) and device_error(what, value) is None):
        raise CallError(
            f"{what} must share its memory with the program, but {type(value).__name__} offers only __array__, "
            f"which may return a copy (results written into it would be lost): pass a NumPy array or {OUTPUT_OBJECTS}"
        )
    return host_array(what, value)


def _convert(what: str, protocol: str, convert: Any, value: Any) -> np.ndarray:
    """``convert(value)``: np.asarray and np.from_dlpack return arrays; the producer's errors name the argument."""
    try:
        return convert(value)
    except Exception as exc:  # noqa: BLE001 - the producer's reason, with the argument's name
        raise CallError(f"{what} could not be read through {protocol}: {exc}") from None
