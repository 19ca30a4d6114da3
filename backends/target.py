"""What a target is: the one interface between the compiler (pipeline, runtime) and a place code runs.

The compiler never branches on a target's name; it asks the target object
(found by name in the registry, :mod:`tcc.targets`):

* **before compiling** -- :meth:`Target.check_options` (are ``arch``/``ptx``
  meaningful here?) and :meth:`Target.prepare` (can this program run here at
  all; the CUDA target refuses matrix functions and needs PyCUDA);
* **the pipeline** -- :attr:`Target.default_pipeline` (the L1 -> L2 passes
  when the user gives none), :meth:`Target.lower_llvm_options` (the options
  of the ``lower-llvm`` that is appended) and :attr:`Target.emit_passes`
  (what follows ``llvm-opt``: ``emit-ptx`` for ``cuda``);
* **LLVM's optimisation** -- :meth:`Target.optimize`, which ``llvm-opt``
  calls for the target the module was lowered for;
* **loading and running** -- :meth:`Target.load` turns the pipeline's result
  into an :class:`Executable`, which :class:`tcc.runtime.compiled.CompiledProgram`
  calls: it checks and binds a call's arguments itself and asks the
  executable where the other arguments live and how kernels run.

Out-of-tree targets subclass :class:`Target` and are found through the
entry-point group ``tcc.targets``.  A target lowers through one of the
codegen targets of ``lower-llvm`` (``cpu``, ``cuda``, ``cuda-sim``: see
:attr:`Target.lowering_target`), since those hold what LLVM must be told.

:class:`CallError` lives here rather than in the runtime because executables
raise it for arguments only they can check (device arrays);
``tcc.runtime.compiled.CallError`` is the same class.
"""
from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, ContextManager, Mapping

import numpy as np

from tcc.backends import BUILTIN_TARGETS
from tcc.ir.diagnostics import TccError

__all__ = [
    "COMPLEX_HINT", "DTYPES", "Call", "CallError", "Executable", "Target", "builtin_target", "target_from_object",
]

#: the element types tcc compiles for
DTYPES = ("float64", "float32")

#: what a complex input's dtype error suggests (the host's and the device's)
COMPLEX_HINT = " (tcc computes with real numbers: pass the real and imaginary parts as separate inputs)"


class CallError(TccError, ValueError):
    """A bad call of a compiled program (wrong name, shape, dtype, layout)."""


@dataclass(frozen=True)
class Invocation:
    """One call of a compiled program, its arguments checked and bound by the runtime.

    ``buffers`` holds every buffer's storage (what :meth:`Executable.check_input`,
    :meth:`Executable.check_output` and :meth:`Executable.new_buffer` gave);
    ``arrays`` what the caller passed.  ``run_extern`` and ``run_parallel``
    are what the runtime lends host code: external kernels (LAPACK and BLAS
    through NumPy, the interpreter's own code) and its process-wide thread
    pool (see :mod:`tcc.runtime.compiled`).
    """

    sizes: Mapping[str, int]
    buffers: dict[str, Any]
    arrays: Mapping[str, Any]
    results: tuple[str, ...]
    dtype: np.dtype
    threads: int
    run_extern: Callable[[Any, Mapping[str, Any]], None]
    run_parallel: Callable[[Any, Any, Any, int], None]


class Executable:
    """A target's loaded code as the runtime calls it; the defaults are those of host NumPy arrays.

    Subclasses are frozen dataclasses with at least ``llvm_module`` (the
    optimised :class:`~tcc.backends.llvm.LLVMModule`, whose ``program`` is
    the L2 program run) and implement :meth:`run`.
    """

    llvm_module: Any

    def describe(self) -> str:
        """Where the code runs, for the compiled program's ``repr``."""
        return self.llvm_module.target

    def program_attributes(self) -> dict[str, Any]:
        """Extra public attributes of the compiled program (``cuda``: ``ptx``)."""
        return {}

    def active(self) -> ContextManager[Any]:
        """What must hold for the length of a call, checks included (``cuda``: the GPU's context)."""
        return contextlib.nullcontext()

    def check_input(self, name: str, value: Any, dtype: np.dtype) -> Any | None:
        """An input this executable takes as it is (a device array), checked; None: the runtime's NumPy checks apply."""
        return None

    def check_output(self, name: str, value: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any | None:
        """A result array passed in that lives here (a device array), checked; None: the NumPy checks apply."""
        return None

    def new_buffer(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """Storage for a result or temporary the caller did not pass."""
        return np.empty(shape, dtype=dtype)

    def overlap(self, a: Any, b: Any) -> bool:
        """Whether two bound buffers may share memory (a result must not overlap any other buffer)."""
        return np.may_share_memory(a, b)

    def run(self, call: Invocation) -> dict[str, Any]:
        """Run every kernel on the bound buffers; the results by name."""
        raise NotImplementedError


class Target:
    """A place compiled code runs, as the compiler asks it (see the module docstring).

    ``name`` is what ``tcc.compile(..., target=...)`` and ``--target`` take;
    ``lowering_target`` the ``target`` option of ``lower-llvm`` (a codegen
    target: ``cpu``, ``cuda`` or ``cuda-sim``; by default the name).
    """

    name: ClassVar[str] = ""
    lowering_target: ClassVar[str] = ""
    #: the L1 -> L2 pipeline when the user gives none
    default_pipeline: ClassVar[str] = ""
    #: ``reassociate`` for the appended ``lower-llvm`` ("" leaves the pass's default)
    reassociate: ClassVar[str] = ""
    #: the passes after ``llvm-opt`` that make what :meth:`load` takes
    emit_passes: ClassVar[tuple[str, ...]] = ()

    def codegen(self) -> str:
        """The codegen target the code is lowered for: what LLVM must be told lives with the built-in ones."""
        return self.lowering_target or self.name

    def check_options(self, arch: str, ptx: int) -> None:
        """Refuse compile options that mean nothing here (TccError)."""

    def lower_llvm_options(self, dtype: str, arch: str = "", ptx: int = 0) -> str:
        """The options of the ``lower-llvm`` appended to a pipeline that lacks one."""
        opts = f"dtype={dtype} target={self.codegen()}"
        if self.reassociate:
            opts += f" reassociate={self.reassociate}"
        if arch:
            opts += f" arch={arch}"
        if ptx:
            opts += f" ptx={ptx}"
        return opts

    def prepare(self, program: Any) -> None:
        """Refuse, before anything is compiled, a program that could not run here (TccError)."""

    def optimize(self, llvm_module: Any, level: int) -> Any:
        """LLVM's ``O<level>`` for a module lowered for this target (what ``llvm-opt`` runs).

        ``llvm-opt`` asks the built-in target a module names (its codegen
        target), so a plug-in target optimises as the one it lowers for.
        """
        raise NotImplementedError

    def load(self, final: Any) -> Executable:
        """The pipeline's result (an optimised LLVM module, or what :attr:`emit_passes` made of it) as code to run."""
        raise NotImplementedError

    def assembly(self, final: Any) -> str:
        """``tcc compile --emit asm``: the machine code of the pipeline's result, as text."""
        raise NotImplementedError


def target_from_object(obj: Any, name: str, origin: str) -> Target:
    """A registry entry (a Target subclass or instance) as a Target named ``name``; TccError otherwise."""
    if isinstance(obj, type) and issubclass(obj, Target):
        obj = obj()
    if not isinstance(obj, Target):
        raise TccError(f"{origin} for target '{name}' is not a tcc Target (subclass or instance): {obj!r}")
    if obj.name != name:
        raise TccError(f"{origin} is named '{name}' but its target {type(obj).__qualname__} has name '{obj.name}'")
    return obj


_BUILTIN: dict[str, Target] = {}


def builtin_target(name: str) -> Target:
    """The built-in target ``name`` (:data:`tcc.backends.BUILTIN_TARGETS`), imported on first use.

    The backends' own passes use this: an LLVM module names the codegen
    target it was lowered for, which is always a built-in one.  Everything
    else looks targets up in the registry, :mod:`tcc.targets`.
    """
    target = _BUILTIN.get(name)
    if target is None:
        if name not in BUILTIN_TARGETS:
            raise TccError(f"unknown built-in target '{name}' (expected {', '.join(BUILTIN_TARGETS)})")
        spec = BUILTIN_TARGETS[name]
        module_name, _, attr = spec.partition(":")
        obj = getattr(importlib.import_module(module_name), attr)
        target = _BUILTIN[name] = target_from_object(obj, name, f"built-in table entry '{spec}'")
    return target
