"""Target machines: what LLVM is told about where code runs, for the host and for NVIDIA GPUs.

Two kinds of knowledge live here, both needed by the lowering *and* by the
CPU and PTX backends (so neither backend module has to import the other, nor
the lowering a backend):

* LLVM's **target machines**: the host's (its triple, CPU name and features,
  opt level 3; what MCJIT and the CPU optimiser use) and NVPTX's for an SM
  architecture and PTX ISA version, with the arch's checks and its default
  (the GPU's compute capability when PyCUDA can ask it, else
  :data:`DEFAULT_ARCH`);
* the **codegen targets** (:class:`CodegenTarget`, found by
  :func:`codegen_target`): the triple, data layout, math-function naming and
  kernel ABI that :func:`tcc.backends.llvm.lower_to_llvm` needs for
  ``lower-llvm{target=cpu|cuda|cuda-sim}``.

It also compiles the runtime's small hand-written native helpers for the host
(:func:`jit_ir`).  llvmlite's binding layer is initialised on first use only.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

import llvmlite.binding as llvm

from tcc.ir.diagnostics import TccError

__all__ = [
    "CodegenTarget",
    "DEFAULT_ARCH",
    "TRIPLE",
    "check_arch",
    "default_arch",
    "device_ordinal",
    "codegen_target",
    "host_data_layout",
    "host_target_machine",
    "host_triple",
    "initialize_host",
    "initialize_nvptx",
    "jit_ir",
    "new_host_target_machine",
    "nvptx_target_machine",
]


# ---------------------------------------------------------------------------
# The host
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def initialize_host() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


def host_triple() -> str:
    initialize_host()
    return llvm.get_process_triple()


def new_host_target_machine() -> llvm.TargetMachine:
    """A fresh host target machine at opt level 3 (each MCJIT engine takes ownership of its own)."""
    initialize_host()
    target = llvm.Target.from_triple(host_triple())
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=3,
        jit=True,
    )


def jit_ir(text: str) -> Any:
    """A finalized MCJIT engine of a small hand-written IR module, compiled for the host.

    The runtime's native helpers (``gemm_loop``, ``counting_sort``,
    ``thread_team``) are such modules: a few functions called through ctypes
    so that a loop runs without the GIL.  The caller keeps the engine alive
    for as long as its functions may run (freeing it frees their code).
    """
    initialize_host()
    module = llvm.parse_assembly(text)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, new_host_target_machine())
    engine.finalize_object()
    return engine


@functools.lru_cache(maxsize=None)
def host_target_machine() -> llvm.TargetMachine:
    """The host target machine at opt level 3, one per process (MCJIT engines get their own)."""
    return new_host_target_machine()


def host_data_layout() -> str:
    return str(host_target_machine().target_data)


# ---------------------------------------------------------------------------
# NVIDIA GPUs
# ---------------------------------------------------------------------------

TRIPLE = "nvptx64-nvidia-cuda"
#: The arch when no GPU can be asked: Ampere, the oldest generation with fast float64 on data-centre parts.
DEFAULT_ARCH = "sm_80"

_ARCH = re.compile(r"sm_[0-9]{2,3}[af]?$")


def check_arch(arch: str) -> str:
    if not _ARCH.match(arch):
        raise TccError(f"invalid GPU architecture '{arch}' (expected sm_XY, e.g. sm_80 or sm_90)")
    return arch


def device_ordinal() -> int:
    """The GPU tcc runs on: ``TCC_CUDA_DEVICE`` (default 0), shared by the default arch and the runtime."""
    text = os.environ.get("TCC_CUDA_DEVICE", "0")
    try:
        return int(text)
    except ValueError:
        raise TccError(f"TCC_CUDA_DEVICE must be a device number, not '{text}'") from None


@functools.lru_cache(maxsize=1)
def default_arch() -> str:
    """``sm_<major><minor>`` of the chosen GPU when PyCUDA can ask it, else :data:`DEFAULT_ARCH`."""
    try:
        import pycuda.driver as drv  # optional, and slow to import: only when an arch must be chosen

        drv.init()
        major, minor = drv.Device(device_ordinal()).compute_capability()
        return f"sm_{major}{minor}"
    except Exception:  # noqa: BLE001 - no PyCUDA, no driver, no such GPU: all mean "ask no device"
        return DEFAULT_ARCH


@functools.lru_cache(maxsize=1)
def initialize_nvptx() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@functools.lru_cache(maxsize=None)
def nvptx_target_machine(arch: str, ptx_version: int = 0) -> llvm.TargetMachine:
    """The NVPTX target machine for ``arch`` at opt level 3 (``ptx_version`` 0: LLVM's minimum)."""
    initialize_nvptx()
    check_arch(arch)
    features = f"+ptx{ptx_version}" if ptx_version else ""
    try:
        target = llvm.Target.from_triple(TRIPLE)
    except RuntimeError as exc:  # pragma: no cover - every llvmlite wheel has NVPTX
        raise TccError(f"this llvmlite was built without the NVPTX target: {exc}") from None
    return target.create_target_machine(cpu=arch, features=features, opt=3)


# ---------------------------------------------------------------------------
# Codegen targets
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CodegenTarget:
    """Everything the lowering needs to know about where the code will run.

    ``intrinsics`` are the math functions emitted as ``llvm.<fn>.<type>``
    (the backend lowers them to instructions or its own library); the others
    are calls to ``<math_prefix><fn>`` with ``f`` appended for float32, which
    is both libm's naming (``tan``/``tanf``) and libdevice's
    (``__nv_tan``/``__nv_tanf``).  ``abi`` names the kernel entry convention:
    ``host`` is the ``(bufs, sizes, part, nparts)`` function described in the
    docstring of :mod:`tcc.backends.llvm`; ``grid`` a GPU kernel (``ptx_kernel`` calling
    convention, buffers and sizes as parameters, thread indices from the PTX
    special registers); ``grid-sim`` the same kernel body compiled for the
    host, entered through a host-ABI function that runs every thread of a
    launch in turn (see "Grid kernels" there).
    """

    name: str
    triple: str
    data_layout: str
    intrinsics: frozenset[str]
    math_prefix: str = ""
    abi: str = "host"
    inline_exp: bool = False  # exp as vectorisable arithmetic (backends/vector_math.py), not a libm call

    def math_symbol(self, fn: str, dtype: str) -> str:
        return self.math_prefix + fn + ("f" if dtype == "float32" else "")




# LLVM 22's NVPTX layout; the PTX backend should check it against its own target machine.
_NVPTX_LAYOUT = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"


def _host() -> CodegenTarget:
    return CodegenTarget(
        name="cpu",
        triple=host_triple(),
        data_layout=host_data_layout(),
        intrinsics=frozenset({"exp", "log", "sqrt", "sin", "cos", "fabs", "pow"}),
        inline_exp=True,
    )


def _nvptx() -> CodegenTarget:
    # NVPTX lowers only these intrinsics; the rest come from libdevice.
    return CodegenTarget(
        name="cuda",
        triple=TRIPLE,
        data_layout=_NVPTX_LAYOUT,
        intrinsics=frozenset({"sqrt", "fabs"}),
        math_prefix="__nv_",
        abi="grid",
    )


def _grid_on_host() -> CodegenTarget:
    host = codegen_target("cpu")
    return CodegenTarget(
        name="cuda-sim",
        triple=host.triple,
        data_layout=host.data_layout,
        intrinsics=host.intrinsics,
        inline_exp=True,
        abi="grid-sim",
    )


#: the codegen targets ``lower-llvm`` knows, by its ``target`` option
_CODEGEN: dict[str, Callable[[], CodegenTarget]] = {"cpu": _host, "cuda": _nvptx, "cuda-sim": _grid_on_host}


@functools.lru_cache(maxsize=None)
def codegen_target(name: str) -> CodegenTarget:
    """The :class:`CodegenTarget` called ``name`` (``cpu`` is the host)."""
    make = _CODEGEN.get(name)
    if make is None:
        raise TccError(f"unknown target '{name}' (expected cpu, cuda or cuda-sim)")
    return make()
