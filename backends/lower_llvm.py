"""``lower-llvm``: L2 loop nests to an LLVM module (:mod:`tcc.backends.llvm`).

An L3 pass lives in the backends layer, beside the code it drives, so that
passes/ never imports a backend (layers import only downward).

The element type and the target are pass options rather than properties of
the loop program because one L2 program serves every precision and device:
only this step and the ones after it differ between them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tcc.passes.pass_base import Level, Pass, PassContext


@dataclass(frozen=True)
class LowerLLVM(Pass):
    name = "lower-llvm"
    level = Level.LOOPS
    produces = Level.LLVM
    summary = "lower loop nests to an LLVM module (one function per kernel)"

    dtype: Literal["float64", "float32"] = "float64"
    target: Literal["cpu", "cuda", "cuda-sim"] = "cpu"
    # Reassociating accumulations lets LLVM vectorize reductions, at the price
    # of results that differ from sequential summation in the last bits; by
    # default only unit-stride ones, where vectorizing pays (backends/llvm/).
    reassociate: Literal["never", "contiguous", "always"] = "contiguous"
    # Fused multiply-adds where the target has them (off: measured slower on
    # the strided-convolution gradient, see backends/llvm/).
    contract: bool = False
    # target cuda: the SM architecture ("" = the GPU's, or sm_80 without one) and
    # the PTX ISA version times ten (0 = the oldest that supports arch)
    arch: str = ""
    ptx: int = 0

    def run(self, program, ctx: PassContext):
        from .llvm import lower_to_llvm  # llvmlite is imported only when code is generated

        return lower_to_llvm(program, self.dtype, self.target, self.reassociate, self.contract, self.arch, self.ptx)
