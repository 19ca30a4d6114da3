"""Target ``cuda-sim``'s runtime: the CUDA backend's grid kernels compiled for the host and "launched" there.

Each kernel is launched with the shape the CUDA runtime's
:func:`tcc.backends.cuda.launch_shape` picks, with deliberately tiny blocks
(:data:`SIM_BLOCK` threads, at most :data:`SIM_MAX_BLOCKS` blocks) so that
even small tests run the grid-stride loop, and the simulated threads run one
after another (the kernel's host entry loops over them: see "Grid kernels"
in :mod:`tcc.backends.llvm`).  It exists to test the grid mapping where
there is no GPU.  External kernels run on the host as on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tcc.ir.loops import For

from . import cpu
from .cuda import launch_shape
from .llvm.kernels import grid_band
from .llvm.module import LLVMModule
from .target import Invocation

__all__ = ["SIM_BLOCK", "SIM_MAX_BLOCKS", "SimExecutable", "jit"]

#: cuda-sim launch shape: threads per block and the most blocks (24 simulated threads in all)
SIM_BLOCK = 8
SIM_MAX_BLOCKS = 3


@dataclass(frozen=True, eq=False)
class SimExecutable(cpu.CpuExecutable):
    """Host code of grid kernels, with each kernel's band (what its launch is sized by)."""

    bands: tuple[tuple[For, ...], ...] = ()

    def run(self, call: Invocation) -> dict[str, Any]:
        ptrs, size_vals = self.arguments(call)
        for k, band in zip(self.kernels, self.bands):
            if k.extern is not None:
                call.run_extern(k.extern, call.buffers)
                continue
            blocks, block = launch_shape(band, call.sizes, SIM_BLOCK, SIM_MAX_BLOCKS, call.buffers)
            if blocks:
                k.fn(ptrs, size_vals, blocks, block)
        return {n: call.buffers[n] for n in call.results}


def jit(llvm_module: LLVMModule) -> SimExecutable:
    """Compile a ``cuda-sim`` module with MCJIT (see :func:`tcc.backends.cpu.jit`), its bands alongside."""
    host = cpu.jit(llvm_module)
    bands = tuple(grid_band(k) for k in host.program.kernels)
    # no zero fills skipped: the simulator runs every kernel as the GPU would
    return SimExecutable(host.kernels, host.program, host.dtype, host.engine, host.llvm_module, zero_fills={}, bands=bands)
