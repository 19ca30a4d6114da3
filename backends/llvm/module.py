"""The L3 program (:class:`LLVMModule`) and the one way tcc runs LLVM's optimisation pipelines.

Shared by every target: the lowering produces an :class:`LLVMModule`, the
CPU and PTX backends optimise it through :func:`run_default_pipeline` (which
works around llvmlite never freeing a pass manager) and parse it back with
:meth:`LLVMModule.parse`.  llvmlite's binding layer is imported only when a
module is parsed or optimised.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from llvmlite import ir

from tcc.ir.loops import LoopProgram

__all__ = ["LLVMModule", "dispose_module_pass_manager", "run_default_pipeline"]


@dataclass(frozen=True, eq=False)
class LLVMModule:
    """An L3 program: the LLVM module plus what the runtime needs to call it.

    ``module`` is an ``llvmlite.ir.Module`` straight from :func:`tcc.backends.llvm.lower.lower_to_llvm`
    and the textual IR after optimisation (LLVM's own objects cannot be
    rebuilt into llvmlite's IR builder objects, and text is what the JIT and
    the PTX emitter parse anyway).  ``str()`` is the IR text.
    """

    module: Union[ir.Module, str]
    program: LoopProgram
    dtype: str
    target: str
    kernel_symbols: tuple[str, ...]
    arch: str = ""  # the GPU architecture (sm_XY) for target cuda, else ""
    ptx_version: int = 0  # PTX ISA version times ten (78 = 7.8); 0 = LLVM's minimum for arch

    def __str__(self) -> str:
        return self.externs_comment() + str(self.module)

    @property
    def text(self) -> str:
        return str(self.module)

    def externs_comment(self) -> str:
        """``;`` lines naming the external kernels, which have no code in the module."""
        lines = [
            f"; kernel {k.name}: {k.extern} runs on the host"
            f" ({'BLAS' if k.extern.fn in ('matmul', 'contract', 'gram') else 'LAPACK'} through NumPy), between the compiled kernels\n"
            for k in self.program.kernels
            if k.extern is not None
        ]
        return "".join(lines)

    def parse(self):
        """The module as LLVM's own ``ModuleRef``, verified.

        LLVM rejecting IR that tcc generated is a compiler bug, hence a
        ``RuntimeError`` carrying LLVM's message rather than a TccError.
        """
        import llvmlite.binding as llvm

        try:
            mod = llvm.parse_assembly(str(self.module))
            mod.verify()
        except RuntimeError as exc:
            raise RuntimeError(f"tcc produced invalid LLVM IR (a compiler bug): {str(exc).strip()}") from None
        return mod

    def verify(self) -> None:
        """LLVM's verifier (what ``--verify-each`` runs on L3); RuntimeError if the IR is broken."""
        self.parse()


def run_default_pipeline(mod: Any, tm: Any, level: int, vectorize: bool | None = None) -> None:
    """Run LLVM's ``O<level>`` module pipeline on ``mod`` for target machine ``tm``, freeing what it builds.

    llvmlite never frees a ``ModulePassManager``: the class inherits
    ``ObjectRef._dispose`` (a no-op) ahead of ``NewPassManager._dispose``
    (llvmlite 0.50), so each pipeline built leaked about 83 kB of native
    memory (the O3 passes and their state).  It is disposed here explicitly;
    a pass manager cannot be run twice (LLVM asserts), so it is not reused.
    The pass builder and tuning options are closed at once rather than when
    the garbage collector gets to them.  ``vectorize``: loop and SLP
    vectorisation on or off (default: LLVM's choice for the level).
    """
    import llvmlite.binding as llvm

    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    try:
        if vectorize is not None:
            pto.loop_vectorization = vectorize
            pto.slp_vectorization = vectorize
        pb = llvm.create_pass_builder(tm, pto)
        try:
            mpm = pb.getModulePassManager()
            try:
                mpm.run(mod, pb)
            finally:
                dispose_module_pass_manager(mpm)
        finally:
            pb.close()
    finally:
        pto.close()


def dispose_module_pass_manager(mpm: Any) -> None:
    """Free a ``ModulePassManager`` now, working around llvmlite's no-op dispose (see :func:`run_default_pipeline`)."""
    from llvmlite.binding import ffi

    if type(mpm)._dispose is ffi.ObjectRef._dispose:  # the llvmlite bug: close() frees nothing
        ffi.lib.LLVMPY_DisposeNewModulePassManger(mpm)
        mpm.detach()
    else:
        mpm.close()
