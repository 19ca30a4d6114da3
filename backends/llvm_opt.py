"""``llvm-opt``: LLVM's own optimisation pipeline as a tcc pass.

Running it as a pass (rather than inside the JIT) puts LLVM's work under
``--time-passes`` and makes the vectorized IR visible with
``--dump-after llvm-opt``.  Which optimiser runs is the question of the
target the module was lowered for (:meth:`tcc.backends.target.Target.optimize`:
the host's O3 for ``cpu`` and ``cuda-sim``, libdevice and the NVPTX machine
for ``cuda``).  An L3 pass, so it lives in the backends layer.
"""
from __future__ import annotations

from dataclasses import dataclass

from tcc.passes.pass_base import Level, Pass, PassContext

from .target import builtin_target


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
        return builtin_target(program.target).optimize(program, self.opt_level)
