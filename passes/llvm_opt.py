"""``llvm-opt``: LLVM's own optimisation pipeline as a tcc pass.

Running it as a pass (rather than inside the JIT) puts LLVM's work under
``--time-passes`` and makes the vectorized IR visible with
``--dump-after llvm-opt``.
"""
from __future__ import annotations

from dataclasses import dataclass

from tcc.passes.pass_base import Level, Pass, PassContext


@dataclass(frozen=True)
class LLVMOpt(Pass):
    name = "llvm-opt"
    level = Level.LLVM
    summary = "optimise the LLVM module (new pass manager, O3, loop and SLP vectorization)"

    # Not called ``level``: that name is the class's IR level (Pass.level).
    opt_level: int = 3

    def __post_init__(self) -> None:
        if not 0 <= self.opt_level <= 3:
            raise ValueError(f"opt-level must be 0..3, not {self.opt_level}")

    def run(self, program, ctx: PassContext):
        if program.target == "cuda":  # libdevice linked in, NVPTX target machine
            from tcc.backends import ptx

            return ptx.optimize(program, self.opt_level)
        from tcc.backends import cpu  # cpu, and cuda-sim: grid kernels run on the host

        return cpu.optimize(program, self.opt_level)
