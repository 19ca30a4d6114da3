"""Backends: the LLVM lowering shared by every target, the CPU (MCJIT) and GPU (PTX, PyCUDA) code paths, and the targets.

How a target name is found is :mod:`tcc.targets`'s business (the registry:
programmatic registrations, this table, then the entry-point group
``tcc.targets``).  :data:`BUILTIN_TARGETS` is the built-in part: target name
-> ``"module:ClassName"`` of a :class:`tcc.backends.target.Target` subclass,
imported only when the target is asked for, so ``import tcc`` and the
command line stay cheap.

Keep this module free of imports: the command line reads it to list the
targets.
"""

BUILTIN_TARGETS: dict[str, str] = {
    "cpu": "tcc.backends.builtin_targets:CpuTarget",
    "cuda": "tcc.backends.builtin_targets:CudaTarget",
    "cuda-sim": "tcc.backends.builtin_targets:CudaSimTarget",
}
