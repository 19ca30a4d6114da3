"""The built-in targets: ``cpu`` (the host, MCJIT), ``cuda`` (NVIDIA GPUs, PTX through PyCUDA) and ``cuda-sim``.

Each answers the compiler's questions (:class:`tcc.backends.target.Target`)
for its backend.  This module is what the registry imports to find a
built-in target, also for ``tcc compile --emit loops``, which generates no
code: so the backend modules (llvmlite, and PyCUDA for ``cuda``) are
imported in the methods that need them, not here.
"""
from __future__ import annotations

from typing import Any

from tcc.ir.diagnostics import TccError
from tcc.ir.expr import MatrixFn

from .target import Executable, Target

__all__ = ["CpuTarget", "CudaSimTarget", "CudaTarget", "DEFAULT_GPU_PIPELINE", "DEFAULT_LOOP_PIPELINE"]

DEFAULT_LOOP_PIPELINE = "infer-ranges,contract-order,col2im,im2col,blas,lower-loops,interchange,hoist,peel,reduce-in-place,fuse-rows,privatize,fuse-inner,tile,unroll-jam,matvec-pair,fuse,reuse-buffers,parallel"
# The GPU maps loops to threads, so it keeps what the CPU pipeline trades away
# for registers and caches: no reduce-in-place or unroll-jam (they move
# reductions outside output loops and give one thread several outputs), no
# peel or interchange (they split or reorder loops inside a thread, where
# coalescing across threads matters more than the order within one); fusion
# only of whole nests, and every perfectly nested parallel loop marked, so
# the grid gets one thread per output element; long reductions over few
# outputs split into parallel partial sums (docs/cuda.md).  No tile either:
# neighbouring threads already read a column reduction's row contiguously
# (coalesced), and tiles would give each thread T outputs, the grid T times
# fewer threads.
DEFAULT_GPU_PIPELINE = "infer-ranges,contract-order,lower-loops,hoist,fuse{full=true},reuse-buffers,parallel{depth=8},split-reduction"


class _HostCode(Target):
    """Targets whose kernels are host code: optimised for the host CPU, shown as host assembly."""

    def optimize(self, llvm_module: Any, level: int) -> Any:
        from . import cpu  # llvmlite: only when code is generated

        return cpu.optimize(llvm_module, level)

    def assembly(self, final: Any) -> str:
        from . import cpu

        return cpu.emit_assembly(final)


class CpuTarget(_HostCode):
    """The host CPU: vectorised kernels, parallel loops split over the runtime's threads."""

    name = "cpu"
    default_pipeline = DEFAULT_LOOP_PIPELINE

    def check_options(self, arch: str, ptx: int) -> None:
        if arch or ptx:
            raise TccError("arch and ptx are options of target cuda, not of cpu")

    def load(self, final: Any) -> Executable:
        from . import cpu

        return cpu.jit(final)


class CudaSimTarget(_HostCode):
    """The CUDA target's grid kernels compiled for the host, every thread run in turn: the grid mapping tested without a GPU.

    GPU targets lower with ``reassociate=never``: reassociation only pays
    where LLVM vectorizes, which it does not for NVPTX, and without it a GPU
    thread sums in the reference interpreter's order.
    """

    name = "cuda-sim"
    default_pipeline = DEFAULT_GPU_PIPELINE
    reassociate = "never"

    def load(self, final: Any) -> Executable:
        from . import cuda_sim

        return cuda_sim.jit(final)


class CudaTarget(Target):
    """NVIDIA GPUs: PTX (libdevice linked in) loaded and launched with PyCUDA (see :mod:`tcc.backends.cuda`)."""

    name = "cuda"
    default_pipeline = DEFAULT_GPU_PIPELINE
    reassociate = "never"
    emit_passes = ("emit-ptx",)

    def prepare(self, program: Any) -> None:
        """Fail before compiling anything when it could not run: matrix functions, no PyCUDA or no GPU."""
        from . import cuda

        _refuse_matrix_functions(program)
        cuda.require_pycuda()

    def optimize(self, llvm_module: Any, level: int) -> Any:
        from . import ptx  # libdevice linked in, NVPTX target machine

        return ptx.optimize(llvm_module, level)

    def load(self, final: Any) -> Executable:
        from . import cuda

        if not hasattr(final, "arch") or not hasattr(final, "llvm"):
            raise TccError("a cuda pipeline must end with emit-ptx")
        return cuda.load(final)

    def assembly(self, final: Any) -> str:
        return str(final)  # the PTX


def _refuse_matrix_functions(program: Any) -> None:
    """Matrix functions run on the host (LAPACK through NumPy): the cuda target refuses them.

    Checked on the L1 program, before PyCUDA is needed, so the message is
    the same with or without a GPU (lower-llvm refuses the L2 form too).
    """
    from .llvm.kernels import cuda_refusal  # the llvm package imports llvmlite

    for d in getattr(program, "definitions", ()):
        if isinstance(d.body, MatrixFn):
            raise cuda_refusal(d.body.fn, d.body.args, d.name, d.loc, program.source, d.body.transposed)
