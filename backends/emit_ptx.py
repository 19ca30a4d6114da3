"""``emit-ptx``: an optimised NVPTX module (target ``cuda``) to PTX text (:mod:`tcc.backends.ptx`).

A pass of its own, rather than a step hidden in the runtime, so that the PTX
is an IR state like the others: ``--dump-after emit-ptx`` prints it,
``--dump-dir`` writes it as a ``.ptx`` file, ``--time-passes`` times LLVM's
code generation and ``--verify-each`` runs ``ptxas`` on it where the CUDA
toolkit is installed.  An L3 pass, so it lives in the backends layer.
"""
from __future__ import annotations

from dataclasses import dataclass

from tcc.ir.diagnostics import TccError
from tcc.passes.pass_base import Level, Pass, PassContext


@dataclass(frozen=True)
class EmitPTX(Pass):
    name = "emit-ptx"
    level = Level.LLVM
    produces = Level.PTX
    summary = "generate PTX from an LLVM module for target cuda (run llvm-opt first: it links libdevice)"

    def run(self, program, ctx: PassContext):
        if getattr(program, "target", None) != "cuda":
            raise TccError(f"emit-ptx needs a module for target cuda, not '{getattr(program, 'target', type(program).__name__)}'")
        from .ptx import emit_ptx  # llvmlite: only when PTX is generated

        return emit_ptx(program)
