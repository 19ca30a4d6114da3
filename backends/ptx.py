"""GPU code generation: the shared LLVM lowering retargeted to ``nvptx64-nvidia-cuda``, out as PTX.

What is specific to NVIDIA GPUs lives here; the kernel bodies come from
:func:`tcc.backends.llvm.lower_to_llvm` with ``target="cuda"`` (the grid ABI
described there).  This module

* finds the CUDA toolkit's **libdevice** (``CUDA_HOME``, ``CUDA_PATH``, the
  directory of ``nvcc`` on ``PATH``, then ``/usr/local/cuda``, ``/opt/cuda``,
  ``/usr/lib/cuda``) and links it into modules that call a math function.
  Its functions are then made internal, so after inlining LLVM drops every one
  the kernels do not use; a module without math calls never reads it.
  ``nvvm-reflect-ftz`` is 0 (set by the lowering), so libdevice takes its
  IEEE paths: subnormals are kept, as on the CPU;
* optimises with LLVM's O3 pipeline built for the NVPTX target machine (that
  machine adds the NVVM reflect pass, which resolves libdevice's
  ``__nvvm_reflect`` queries);
* emits PTX text (:func:`emit_ptx`) and, where the toolkit's ``ptxas`` is
  found, assembles it to check it (:func:`ptxas`).

The **SM architecture** (``sm_80``, ``sm_90``, ...) and the **PTX ISA
version** are options of ``lower-llvm`` carried by the module.  An empty arch
means :func:`default_arch`: the compute capability of the GPU tcc runs on
(``TCC_CUDA_DEVICE``, default 0) when PyCUDA and that GPU are present, else ``sm_80`` (Ampere; PTX for it also runs on Hopper and
later, which JIT it).  PTX version 0 means LLVM's minimum for the arch
(7.0 for sm_80, 7.8 for sm_90): the oldest ISA, so the oldest driver that
knows the GPU can load it.

Generating PTX needs neither a GPU nor PyCUDA, only llvmlite (whose LLVM
includes the NVPTX target) and, for math functions, libdevice.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import llvmlite.binding as llvm

from tcc.ir.diagnostics import TccError

from .llvm.machines import (  # re-exported: the arch and the NVPTX machine are shared with the lowering
    DEFAULT_ARCH,
    TRIPLE,
    check_arch,
    default_arch,
    device_ordinal,
    initialize_nvptx,
    nvptx_target_machine,
)
from .llvm.module import LLVMModule, dispose_module_pass_manager, run_default_pipeline

#: the NVPTX target machine for an arch (defined with the host's in :mod:`tcc.backends.llvm.machines`)
target_machine = nvptx_target_machine

__all__ = [
    "DEFAULT_ARCH",
    "PTXModule",
    "cuda_home_candidates",
    "default_arch",
    "emit_ptx",
    "find_libdevice",
    "find_ptxas",
    "optimize",
    "ptxas",
    "target_machine",
]

_LOCK = threading.RLock()


# ---------------------------------------------------------------------------
# The CUDA toolkit
# ---------------------------------------------------------------------------


def cuda_home_candidates() -> list[Path]:
    """Where the CUDA toolkit is looked for, in order (only existing directories)."""
    seen: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(var)
        if value:
            seen.append(Path(value))
    nvcc = shutil.which("nvcc")
    if nvcc:
        seen.append(Path(nvcc).resolve().parent.parent)
    seen += [Path("/usr/local/cuda"), Path("/opt/cuda"), Path("/usr/lib/cuda")]
    out: list[Path] = []
    for p in seen:
        if p.is_dir() and p not in out:
            out.append(p)
    return out


def find_libdevice() -> Path:
    """The toolkit's ``libdevice.10.bc``; a TccError saying where it looked when there is none."""
    looked: list[str] = []
    for home in cuda_home_candidates():
        folder = home / "nvvm" / "libdevice"
        looked.append(str(folder))
        if folder.is_dir():
            found = sorted(folder.glob("libdevice*.bc"))
            if found:
                return found[-1]
    where = ", ".join(looked) if looked else "no CUDA toolkit directory exists"
    raise TccError(
        "the CUDA backend needs libdevice (nvvm/libdevice/libdevice.10.bc of the CUDA toolkit) for math "
        f"functions, and none was found (looked in: {where}); set CUDA_HOME to the toolkit's directory"
    )


def find_ptxas() -> Path | None:
    """The toolkit's ``ptxas`` (PTX assembler), or None when there is none."""
    for home in cuda_home_candidates():
        candidate = home / "bin" / "ptxas"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("ptxas")
    return Path(found) if found else None


@functools.lru_cache(maxsize=1)
def _libdevice_bitcode() -> bytes:
    return find_libdevice().read_bytes()


# ---------------------------------------------------------------------------
# Architecture and target machine
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Optimisation and PTX
# ---------------------------------------------------------------------------


def _check(llvm_module: LLVMModule) -> None:
    if llvm_module.target != "cuda":
        raise ValueError(f"the PTX backend cannot compile a module for target '{llvm_module.target}'")


def optimize(llvm_module: LLVMModule, level: int = 3) -> LLVMModule:
    """Link libdevice where needed, then LLVM's ``O<level>`` pipeline for the NVPTX target machine."""
    _check(llvm_module)
    if not 0 <= level <= 3:
        raise ValueError(f"LLVM optimisation level must be 0..3, not {level}")
    with _LOCK:
        initialize_nvptx()
        mod = llvm_module.parse()
        kernels = set(llvm_module.kernel_symbols)
        if any(f.is_declaration and f.name.startswith("__nv_") for f in mod.functions):
            lib = llvm.parse_bitcode(_libdevice_bitcode())
            lib.triple, lib.data_layout = mod.triple, mod.data_layout  # libdevice says nvptx64-nvidia-gpulibs
            mod.link_in(lib)
            # internal: unused library functions die in globaldce, used ones inline
            for f in mod.functions:
                if not f.is_declaration and f.name not in kernels:
                    f.linkage = "internal"
        tm = target_machine(llvm_module.arch, llvm_module.ptx_version)
        # drop the hundreds of unused libdevice functions before O3 looks at each
        pto = llvm.create_pipeline_tuning_options(speed_level=level)
        pb = llvm.create_pass_builder(tm, pto)
        dce = llvm.create_new_module_pass_manager()
        try:
            dce.add_global_dead_code_eliminate_pass()
            dce.run(mod, pb)
        finally:
            dispose_module_pass_manager(dce)
            pb.close()
            pto.close()
        run_default_pipeline(mod, tm, level)
        try:
            mod.verify()
        except RuntimeError as exc:  # pragma: no cover - LLVM's own bug
            raise RuntimeError(f"LLVM's optimizer produced invalid IR: {exc}") from None
        unresolved = sorted(f.name for f in mod.functions if f.is_declaration and f.name.startswith("__nv"))
        if unresolved:  # pragma: no cover - libdevice defines every __nv_ function tcc calls
            raise RuntimeError(f"libdevice did not define {', '.join(unresolved)} (a compiler bug)")
        text = str(mod)
    return replace(llvm_module, module=text)


@dataclass(frozen=True, eq=False)
class PTXModule:
    """PTX text plus what the CUDA runtime needs to launch it.

    ``llvm`` is the (optimised) module it came from: its ``program`` is the L2
    program whose kernels the runtime maps to the grid, and its
    ``kernel_symbols`` name the PTX entries in kernel order.  ``str()`` is the
    PTX, what ``tcc compile --emit ptx`` prints and ``--dump-dir`` writes as
    ``.ptx``.
    """

    text: str
    llvm: LLVMModule
    arch: str

    def __str__(self) -> str:
        return self.text

    @property
    def program(self):
        return self.llvm.program

    @property
    def dtype(self) -> str:
        return self.llvm.dtype

    @property
    def target(self) -> str:
        return "cuda"

    @property
    def kernel_symbols(self) -> tuple[str, ...]:
        return self.llvm.kernel_symbols

    def verify(self) -> None:
        """Assemble with ``ptxas`` for this arch when the toolkit has one (``--verify-each``)."""
        if find_ptxas() is not None:
            ptxas(self.text, self.arch)


def emit_ptx(llvm_module: LLVMModule) -> PTXModule:
    """PTX for the module as it is (run :func:`optimize` first: it links libdevice)."""
    _check(llvm_module)
    with _LOCK:
        initialize_nvptx()
        mod = llvm_module.parse()
        undefined = sorted(f.name for f in mod.functions if f.is_declaration and f.name.startswith("__nv_"))
        if undefined:
            raise TccError(
                f"the module still calls {', '.join(undefined)} from libdevice; run llvm-opt before emit-ptx (it links libdevice)"
            )
        text = target_machine(llvm_module.arch, llvm_module.ptx_version).emit_assembly(mod)
    return PTXModule(text, llvm_module, llvm_module.arch)


def ptxas(ptx_text: str, arch: str, executable: Path | None = None) -> None:
    """Assemble ``ptx_text`` for ``arch`` with the toolkit's ``ptxas``; TccError with its message if it refuses."""
    check_arch(arch)
    exe = executable or find_ptxas()
    if exe is None:
        raise TccError("ptxas was not found (install the CUDA toolkit or set CUDA_HOME)")
    with tempfile.TemporaryDirectory(prefix="tcc-ptxas-") as tmp:
        src = Path(tmp) / "kernels.ptx"
        src.write_text(ptx_text)
        proc = subprocess.run(
            [str(exe), f"-arch={arch}", str(src), "-o", str(Path(tmp) / "kernels.cubin")],
            capture_output=True,
            text=True,
        )
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().replace(str(src), "<ptx>")
        raise TccError(f"ptxas rejected the PTX for {arch}: {message}")
