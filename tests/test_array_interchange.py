"""Array interchange on the CPU: other libraries' arrays in and out of compiled programs.

Zero-copy is checked with ``np.shares_memory`` on the arrays a call binds
(``CompiledProgram.bind``) and by outputs written in place; the checks and
their messages must be those of NumPy arrays.  The main tests use only NumPy's
own DLPack export and small classes; the torch tests skip without torch.
"""
from __future__ import annotations

import array
from typing import Any

import numpy as np
import pytest

import tcc
from tcc import CallError

SCALED = "input x[n], s\ny[i] = x[i] * s\n"
TOKENS = "input w[v]\nindex tok[n] < v\ny[i] = w[tok[i]]\n"
KINDS = "an array object (__array_interface__, __array__, the buffer protocol or DLPack)"


@pytest.fixture(scope="module")
def scale() -> Any:
    return tcc.compile(SCALED)


@pytest.fixture(scope="module")
def gather() -> Any:
    return tcc.compile(TOKENS)


def message(f: Any, **arrays: Any) -> str:
    with pytest.raises(CallError) as info:
        f(**arrays)
    return info.value.message


class DLPackOnly:
    """An array that offers DLPack and nothing else (NumPy's own export underneath)."""

    def __init__(self, a: np.ndarray, device: tuple[int, int] = (1, 0)) -> None:
        self.a, self.device = a, device

    def __dlpack__(self, **kw: Any) -> Any:
        assert self.device == (1, 0), "a device array's memory must not be requested"
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


class InterfaceOnly:
    """An array that offers only ``__array_interface__`` (a pointer into another array's memory)."""

    def __init__(self, a: np.ndarray, readonly: bool = False) -> None:
        self.a = a
        iface = dict(a.__array_interface__)
        iface["data"] = (a.ctypes.data, readonly)
        self.__array_interface__ = iface


class ArrayOnly:
    """An array that offers only ``__array__`` (here a view, but nothing promises that)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.a


def bound(f: Any, name: str, **arrays: Any) -> np.ndarray:
    """The array the call binds for ``name``: what the kernels read or write."""
    return f.bind(arrays)[1][name]


# -- inputs: every protocol, no copy -------------------------------------------
@pytest.mark.parametrize("wrap", [DLPackOnly, InterfaceOnly, ArrayOnly, memoryview], ids=lambda w: w.__name__)
@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_inputs_are_views_and_compute_the_same(wrap: Any, target: str) -> None:
    f = tcc.compile(SCALED, target)
    x = np.linspace(-1.0, 2.0, 7)
    assert np.shares_memory(bound(f, "x", x=wrap(x), s=3.0), x)
    out = f(x=wrap(x), s=3.0)
    assert type(out["y"]) is np.ndarray
    np.testing.assert_array_equal(out["y"], x * 3.0)


def test_buffer_protocol_objects_are_views(scale: Any) -> None:
    x = array.array("d", [1.0, 2.0, 4.0])
    assert np.shares_memory(bound(scale, "x", x=x, s=1.0), np.frombuffer(x))
    np.testing.assert_array_equal(scale(x=x, s=0.5)["y"], [0.5, 1.0, 2.0])
    raw = bytearray(np.arange(4.0).tobytes())
    np.testing.assert_array_equal(scale(x=memoryview(raw).cast("d"), s=2.0)["y"], [0.0, 2.0, 4.0, 6.0])


def test_dlpack_scalar_input(scale: Any) -> None:
    s = np.array(2.5)
    np.testing.assert_array_equal(scale(x=np.ones(2), s=DLPackOnly(s))["y"], [2.5, 2.5])


# -- outputs: written in place ----------------------------------------------------
@pytest.mark.parametrize("wrap", [DLPackOnly, InterfaceOnly, memoryview], ids=lambda w: w.__name__)
def test_outputs_are_written_in_place(scale: Any, wrap: Any) -> None:
    x, y = np.arange(5.0), np.full(5, np.nan)
    out = scale(x=x, s=-2.0, y=wrap(y))
    np.testing.assert_array_equal(y, x * -2.0)
    assert type(out["y"]) is np.ndarray and np.shares_memory(out["y"], y)


def test_array_array_output(scale: Any) -> None:
    y = array.array("d", [0.0, 0.0])
    scale(x=array.array("d", [1.5, 3.0]), s=2.0, y=y)
    assert y.tolist() == [3.0, 6.0]


def test_output_offering_only_array_is_refused(scale: Any) -> None:
    assert message(scale, x=np.ones(2), s=1.0, y=ArrayOnly(np.empty(2))) == (
        "output 'y' must share its memory with the program, but ArrayOnly offers only __array__, which may return "
        "a copy (results written into it would be lost): pass a NumPy array or an array object that shares its "
        "memory (__array_interface__, the buffer protocol or DLPack)"
    )


def test_read_only_outputs_are_refused(scale: Any) -> None:
    frozen = np.zeros(2)
    frozen.flags.writeable = False
    for y in (InterfaceOnly(np.zeros(2), readonly=True), DLPackOnly(frozen)):
        assert message(scale, x=np.ones(2), s=1.0, y=y) == "output 'y' is read-only"


def test_overlap_is_seen_through_views(scale: Any) -> None:
    x = np.ones(4)
    assert message(scale, x=DLPackOnly(x), s=1.0, y=memoryview(x)) == "output 'y' overlaps the memory of 'x'"


def test_unsupported_output(scale: Any) -> None:
    assert message(scale, x=np.ones(2), s=1.0, y=[0.0, 0.0]) == (
        "output 'y' must be a NumPy array or an array object that shares its memory "
        "(__array_interface__, the buffer protocol or DLPack), got list"
    )


# -- the checks and messages of NumPy arrays ---------------------------------------
@pytest.mark.parametrize("wrap", [DLPackOnly, InterfaceOnly, ArrayOnly, memoryview], ids=lambda w: w.__name__)
@pytest.mark.parametrize("data", [
    np.ones(3, np.float32), np.ones(3, np.int64), np.ones(3, np.complex128), np.ones(6)[::2], np.ones((2, 2)),
], ids=["float32", "int64", "complex", "strided", "rank-2"])
def test_same_errors_as_numpy(scale: Any, wrap: Any, data: np.ndarray) -> None:
    assert message(scale, x=wrap(data), s=1.0) == message(scale, x=data, s=1.0)


def test_wrong_dtype_from_array_array_is_not_converted(scale: Any) -> None:
    assert message(scale, x=array.array("f", [1.0]), s=1.0) == (
        "input 'x' has dtype float32, but this program was compiled for float64 "
        "(convert with .astype(np.float64) or compile with dtype='float32')"
    )


@pytest.mark.parametrize("value, kind", [([1.0, 2.0], "list"), ((1.0,), "tuple"), (None, "NoneType"),
                                         (b"\0" * 8, "bytes"), ("1", "str"), (np.float64(1.0), "float64")])
def test_unsupported_inputs_name_the_accepted_kinds(scale: Any, value: Any, kind: str) -> None:
    assert message(scale, x=value, s=1.0) == f"input 'x' must be a NumPy array of float64 or {KINDS}, got {kind}"


@pytest.mark.parametrize("value, kind", [(1 + 2j, "complex"), (np.bool_(True), "bool"), ([2.0], "list")])
def test_scalar_inputs_keep_their_rules(scale: Any, value: Any, kind: str) -> None:
    assert message(scale, x=np.ones(2), s=value) == (
        f"input 's' must be a real number, a NumPy array of float64 or {KINDS}, got {kind}"
    )


def test_producer_refusal_names_the_input(scale: Any) -> None:
    class Refuses(DLPackOnly):
        def __dlpack__(self, **kw: Any) -> Any:
            raise BufferError("this array is locked")

    assert message(scale, x=Refuses(np.ones(2)), s=1.0) == (
        "input 'x' could not be read through DLPack: this array is locked"
    )


# -- memory that is not the host's ------------------------------------------------
def test_cuda_dlpack_device_points_to_the_cuda_target(scale: Any) -> None:
    assert message(scale, x=DLPackOnly(np.ones(2), device=(2, 1)), s=1.0) == (
        "input 'x' is on a CUDA device (DLPackOnly on DLPack device (2, 1)), but this program reads host memory: "
        "compile with target='cuda' to pass GPU arrays, or copy it to the CPU"
    )


def test_other_devices_are_named(scale: Any) -> None:
    assert message(scale, x=np.ones(2), s=1.0, y=DLPackOnly(np.ones(2), device=(8, 0))) == (
        "output 'y' is on a Metal device (DLPackOnly on DLPack device (8, 0)), but this program reads host memory: "
        "copy it to the CPU"
    )


def test_a_device_that_cannot_be_read_is_refused(scale: Any) -> None:
    class Silent(DLPackOnly):
        def __dlpack_device__(self) -> tuple[int, int]:
            raise RuntimeError("no device")

    assert message(scale, x=Silent(np.ones(2)), s=1.0) == (
        "input 'x' is on a device it does not name (__dlpack_device__ gave RuntimeError('no device')), "
        "but this program reads host memory: copy it to the CPU"
    )


def test_cuda_array_interface_is_refused_on_the_cpu(scale: Any) -> None:
    class DeviceArray:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f8", "data": (1 << 40, False), "version": 3}

        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            raise AssertionError("a device array must not be copied back")

    assert message(scale, x=DeviceArray(), s=1.0) == (
        "input 'x' is on a CUDA device (DeviceArray with __cuda_array_interface__), but this program reads host "
        "memory: compile with target='cuda' to pass GPU arrays, or copy it to the CPU"
    )


# -- index inputs -----------------------------------------------------------------
def test_index_inputs_through_dlpack(gather: Any) -> None:
    w = np.array([10.0, 20.0, 30.0])
    tok = np.array([2, 0, 2], dtype=np.int32)
    np.testing.assert_array_equal(gather(w=DLPackOnly(w), tok=DLPackOnly(tok))["y"], [30.0, 10.0, 30.0])
    assert message(gather, w=w, tok=DLPackOnly(np.array([0, 3]))) == (
        "index input 'tok' has tok[1] = 3, outside its declared range 0..2 (tok < v = 3)"
    )
    assert message(gather, w=w, tok=DLPackOnly(np.array([0.0]))) == (
        "index input 'tok' must be an integer array (int64 or int32), got dtype float64"
    )


def test_index_input_on_a_device_is_refused(gather: Any) -> None:
    assert message(gather, w=np.ones(3), tok=DLPackOnly(np.array([0]), device=(2, 0))) == (
        "index input 'tok' must be a NumPy integer array: index inputs are validated on the host "
        "(it is on a CUDA device (DLPackOnly on DLPack device (2, 0)))"
    )


# -- PyTorch (optional) -------------------------------------------------------------
def test_torch_cpu_tensors_are_shared(scale: Any, gather: Any) -> None:
    torch = pytest.importorskip("torch")
    x = torch.linspace(0, 1, 6, dtype=torch.float64)
    assert np.shares_memory(bound(scale, "x", x=x, s=1.0), x.numpy())
    y = torch.empty(6, dtype=torch.float64)
    out = scale(x=x, s=torch.tensor(4.0, dtype=torch.float64), y=y)
    assert torch.equal(y, x * 4.0) and np.shares_memory(out["y"], y.numpy())
    tok = torch.tensor([1, 1, 0])
    np.testing.assert_array_equal(gather(w=torch.tensor([5.0, 6.0], dtype=torch.float64), tok=tok)["y"], [6, 6, 5])


def test_torch_errors(scale: Any) -> None:
    torch = pytest.importorskip("torch")
    assert message(scale, x=torch.ones(3), s=1.0) == message(scale, x=np.ones(3, np.float32), s=1.0)
    t = torch.ones(3, 2, dtype=torch.float64)[:, 0]
    assert message(scale, x=t, s=1.0) == "input 'x' is not C-contiguous (strides (16,)); pass np.ascontiguousarray(x)"
    assert message(scale, x=torch.ones(2, dtype=torch.float64, requires_grad=True), s=1.0) == (
        "input 'x' could not be read through DLPack: Can't export tensors that require gradient, use tensor.detach()"
    )
