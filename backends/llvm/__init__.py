"""L3: one lowering from the L2 loop IR to an llvmlite ``ir.Module``, shared by CPU and GPU.

The package is split by what each part holds: :mod:`.module` the L3 program
(:class:`LLVMModule`) and LLVM's optimisation pipeline, :mod:`.machines` the
target machines and codegen targets, :mod:`.kernels` what the lowering and
the runtimes agree on about kernels (symbols, grid bands), :mod:`.lower`
the module set-up and the statements of a kernel, :mod:`.entries` its entry
functions (one per ABI), :mod:`.exprs` its expressions.  A package rather
than sibling modules of backends/ so that the lowering's parts sit together
and ``tcc.backends.llvm`` stays the one name to import.  This docstring
describes the lowering as a whole; everything is re-exported here.

The kernel ABI
--------------
Every kernel becomes one external function::

    void tcc_<index>_<name>(ptr bufs, ptr sizes, i64 part, i64 nparts)

``bufs`` points to one element pointer per ``program.buffers`` entry (in that
order, which :class:`~tcc.ir.loops.LoopProgram` keeps canonical) and ``sizes``
to one ``i64`` per ``program.sizes`` entry.  A kernel whose body is a single
parallel loop runs only chunk ``part`` of ``nparts`` contiguous chunks of that
loop's range (each ``ceil(count / nparts)`` iterations); any other kernel
ignores ``part``/``nparts`` and the runtime calls it with ``0, 1``.  One
fixed signature means the runtime needs no per-kernel ctypes prototypes.

Why each kernel is two functions
--------------------------------
The external entry only unpacks the two arrays and calls an internal
``<symbol>.body`` that takes every buffer the kernel reads or writes as a
separate ``noalias`` pointer and every size as an ``i64`` value.  The
runtime guarantees that different buffers never overlap, and ``noalias`` is how LLVM learns it: after inlining,
the attribute turns into ``alias.scope``/``noalias`` metadata, so the loop
vectorizer needs no runtime overlap checks.  It also keeps the body free of
``bufs``/``sizes`` reloads that LLVM could not otherwise hoist across stores.
Only the kernel's own buffers are passed (:func:`kernel_buffers`): with every
buffer of the program, each kernel of a program with ``B`` buffers would
carry ``B`` loads, arguments and alias scopes, so ``K`` kernels cost LLVM
``O(K * B)`` -- quadratic in a chain of definitions, where ``B`` grows with
``K`` (the gradient of a 100-step chain: 400 kernels, 200 buffers).

Kernels that differ only in names share one body (host target)
---------------------------------------------------------------
A chain of similar definitions (``h2 = A tanh(h1)``, ``h3 = A tanh(h2)``,
... and their adjoints) lowers to many kernels that are the same code on
different buffers.  Two kernels whose statements are equal up to a
consistent renaming of buffers (by their position among the kernel's
buffers), loop variables and scalars (:func:`kernel_shape`) are one body
function: the later kernel's entry calls the earlier kernel's body.  A body
that is shared is ``noinline`` (otherwise LLVM would inline and optimise it
once per caller, which is the work sharing saves) -- its ``noalias``
parameters give LLVM the same aliasing facts as the metadata inlining makes
of them; a body used once stays ``alwaysinline``, so a program without such
repetition lowers exactly as before.  The 100-step chain's gradient has 399
kernels and 9 distinct bodies (4 of them shared).  GPU targets keep one
body per kernel.

Semantics that matter for correctness
-------------------------------------
* Index arithmetic is ``i64``; ``//`` is floor division and ``%`` the
  non-negative remainder (divisors are positive constants).  An index
  expression that could overflow it is refused (:func:`tcc.sizes.check_index_range`).
* ``where`` is lazy: its untaken branch may load out of bounds, so it becomes
  branches and a phi unless both sides are load- and call-free.
* Math follows the NumPy reference interpreter (:mod:`tcc.reference.interpreter`):
  ``sign(0) = sign(-0) = relu(-0) = +0``, NaN propagates through ``sign`` and ``relu``, ``sigmoid``
  uses the overflow-free two-sided form.  No fast-math flags, except
  ``reassoc`` on accumulations as ``reassociate`` says (that is what lets
  LLVM vectorize a floating-point reduction; it changes the summation order
  and so the rounding): ``never``; ``always``; or ``contiguous`` (the
  default), only for a scalar accumulation whose loads walk memory with
  stride 1 or 2 (in the last dimension) in the innermost loop -- the loads of the ``let``s it
  reads included (``s_acc += e_v`` after ``fuse-inner`` forwarded ``e``), and an ``N x 1``
  buffer's trailing axis not counted -- there vectorizing pays, while a
  vectorized strided reduction turns into gathers and runs slower than the
  scalar loop (measured: 2x slower on a convolution's input gradient).
  ``contract`` (off by default) lets ``a*b + c`` become a fused
  multiply-add: one rounding instead of two.  Measured on this repository's
  benchmarks it did not pay: the strided-convolution gradient got 30 %
  slower (LLVM's vectorization choices change), the correlation gradient
  was unchanged.
* ``x ** c`` with a small integer constant ``c`` is repeated multiplication
  (a reciprocal for ``c < 0``); other powers call ``pow``.

Grid kernels (targets ``cuda`` and ``cuda-sim``)
-----------------------------------------------
A GPU kernel spreads the kernel's *band* -- the ``parallel`` loops perfectly
nested from the top whose bounds use sizes only (:func:`grid_band`; the GPU
pipeline runs ``parallel{depth=...}`` to mark more than the outermost) -- over
the grid: the band's iteration space is flattened row-major (last loop
fastest, so neighbouring threads touch neighbouring elements and loads
coalesce) into ``total`` iterations, and thread ``ctaid * ntid + tid`` runs
iterations ``gid, gid + stride, ...`` with ``stride = nctaid * ntid`` (a
grid-stride loop: any launch shape covers any extent, so the runtime can cap
the grid).  Each iteration decomposes its linear index back into the loop
variables with unsigned ``/`` and ``%`` and runs the innermost band loop's
body unchanged.  This is Urban's gather (sec. 5.1 and 7): one
output element per thread, no atomics, no temporary memory.  A kernel
without a band (a scalar reduction, several nests in a row) runs whole on
thread 0 of block 0; the runtime launches it with one thread.  Index
arithmetic stays ``i64`` (NVPTX's slow-division bypass makes ``/`` 32-bit at
run time when the operands fit).

The ``cuda`` entry is ``ptx_kernel void tcc_<i>_<name>(ptr buf..., i64
size...)``: every buffer of the program (``noalias``), then every size, so
all kernels of a program take the same parameters.  The ``cuda-sim`` entry
has the host ABI's signature, ``(bufs, sizes, nblocks, nthreads)``, and
calls the same body for every block and thread in turn: the grid mapping
runs, and is tested, on machines without a GPU.

Everything target-specific (triple, data layout, which math functions are
LLVM intrinsics and how library math functions are named) lives in
:class:`CodegenTarget`, so the CUDA backend can reuse :func:`lower_to_llvm`.

External kernels
----------------
A kernel that is ``extern inv(A) -> B`` (a matrix function,
:attr:`tcc.ir.loops.Kernel.extern`) or ``extern matmul(A, B) -> C`` (a matrix
product) produces no LLVM function: the runtime runs it with LAPACK or BLAS
through NumPy between the compiled kernels.  Its entry in
``kernel_symbols`` is ``""`` and the printed module lists it in a comment.
Target ``cuda`` refuses such programs (:func:`cuda_refusal`); ``cuda-sim``
runs them on the host like the CPU.
"""
from __future__ import annotations

from ..target import DTYPES
from .exprs import POW_UNROLL_LIMIT
from .kernels import band_extents, cuda_refusal, grid_band, kernel_buffers, kernel_shape, kernel_symbol
from .lower import REASSOCIATE, lower_to_llvm
from .machines import CodegenTarget, codegen_target
from .module import LLVMModule, dispose_module_pass_manager, run_default_pipeline

__all__ = [
    "LLVMModule",
    "CodegenTarget",
    "codegen_target",
    "grid_band",
    "band_extents",
    "kernel_buffers",
    "kernel_shape",
    "kernel_symbol",
    "cuda_refusal",
    "lower_to_llvm",
    "dispose_module_pass_manager",
    "run_default_pipeline",
    "DTYPES",
    "POW_UNROLL_LIMIT",
    "REASSOCIATE",
]
