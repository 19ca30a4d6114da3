"""L3: one lowering from the L2 loop IR to an llvmlite ``ir.Module``, shared by CPU and GPU.

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
* Math follows the NumPy reference interpreter (:mod:`tcc.interpreter`):
  ``sign(0) = sign(-0) = relu(-0) = +0``, NaN propagates through ``sign`` and ``relu``, ``sigmoid``
  uses the overflow-free two-sided form.  No fast-math flags, except
  ``reassoc`` on accumulations as ``reassociate`` says (that is what lets
  LLVM vectorize a floating-point reduction; it changes the summation order
  and so the rounding): ``never``; ``always``; or ``contiguous`` (the
  default), only for a scalar accumulation whose loads walk memory with
  stride 1 or 2 (in the last dimension) in the innermost loop -- there vectorizing pays, while a
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
body unchanged.  This is Urban's gather (seed 000, sec. 5.1 and 7): one
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
:class:`Target`, so the CUDA backend can reuse :func:`lower_program`.

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

import functools
import re
from dataclasses import dataclass
from typing import Any, Mapping, Union

from llvmlite import ir

from tcc.ir.diagnostics import TccError
from tcc.ir.expr import Access, Binary, Const, CSum, Expr, Sum, Unary, Where, postorder, transform
from tcc.ir.index import Affine, And, Compare, Cond, FloorDiv, Mod, Not, Or
from tcc.ir.loops import (
    Accumulate,
    Buffer,
    For,
    If,
    Kernel,
    Let,
    Local,
    LoopProgram,
    Stmt,
    Store,
    stmt_exprs,
    walk_stmts,
)
from tcc.sizes import check_index_range

__all__ = [
    "LLVMModule",
    "Target",
    "get_target",
    "grid_band",
    "band_extents",
    "kernel_symbol",
    "cuda_refusal",
    "lower_program",
    "DTYPES",
    "POW_UNROLL_LIMIT",
]

DTYPES = ("float64", "float32")

#: ``x ** c`` with an integer constant ``|c| <= POW_UNROLL_LIMIT`` is multiplied out.
POW_UNROLL_LIMIT = 16

I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()


# ---------------------------------------------------------------------------
# The result
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class LLVMModule:
    """An L3 program: the LLVM module plus what the runtime needs to call it.

    ``module`` is an ``llvmlite.ir.Module`` straight from :func:`lower_program`
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
            f" ({'BLAS' if k.extern.fn == 'matmul' else 'LAPACK'} through NumPy), between the compiled kernels\n"
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


# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Everything the lowering needs to know about where the code will run.

    ``intrinsics`` are the math functions emitted as ``llvm.<fn>.<type>``
    (the backend lowers them to instructions or its own library); the others
    are calls to ``<math_prefix><fn>`` with ``f`` appended for float32, which
    is both libm's naming (``tan``/``tanf``) and libdevice's
    (``__nv_tan``/``__nv_tanf``).  ``abi`` names the kernel entry convention:
    ``host`` is the ``(bufs, sizes, part, nparts)`` function described in the
    module docstring; ``grid`` a GPU kernel (``ptx_kernel`` calling
    convention, buffers and sizes as parameters, thread indices from the PTX
    special registers); ``grid-sim`` the same kernel body compiled for the
    host, entered through a host-ABI function that runs every thread of a
    launch in turn (see "Grid kernels" in the module docstring).
    """

    name: str
    triple: str
    data_layout: str
    intrinsics: frozenset[str]
    math_prefix: str = ""
    abi: str = "host"
    inline_exp: bool = False  # exp as vectorisable arithmetic (backends/vector_math.py), not a libm call

    def math_symbol(self, fn: str, dtype: str) -> str:
        return self.math_prefix + fn + ("f" if dtype == "float32" else "")


# libm/libdevice names of the language's functions where they differ
_MATH_NAMES = {"abs": "fabs"}

# LLVM 22's NVPTX layout; the PTX backend should check it against its own target machine.
_NVPTX_LAYOUT = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"


@functools.lru_cache(maxsize=None)
def get_target(name: str) -> Target:
    """The :class:`Target` called ``name`` (``cpu`` is the host)."""
    if name == "cpu":
        from tcc.backends import cpu

        return Target(
            name="cpu",
            triple=cpu.host_triple(),
            data_layout=cpu.host_data_layout(),
            intrinsics=frozenset({"exp", "log", "sqrt", "sin", "cos", "fabs", "pow"}),
            inline_exp=True,
        )
    if name == "cuda":
        # NVPTX lowers only these intrinsics; the rest come from libdevice.
        return Target(
            name="cuda",
            triple="nvptx64-nvidia-cuda",
            data_layout=_NVPTX_LAYOUT,
            intrinsics=frozenset({"sqrt", "fabs"}),
            math_prefix="__nv_",
            abi="grid",
        )
    if name == "cuda-sim":
        host = get_target("cpu")
        return Target(
            name="cuda-sim",
            triple=host.triple,
            data_layout=host.data_layout,
            intrinsics=host.intrinsics,
            inline_exp=True,
            abi="grid-sim",
        )
    raise TccError(f"unknown target '{name}' (expected cpu, cuda or cuda-sim)")


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def grid_band(kernel: Kernel) -> tuple[For, ...]:
    """The loops a grid kernel spreads over GPU threads (see "Grid kernels" above).

    The parallel loops perfectly nested from the top of the kernel, as long
    as each one's bounds name no variable of an enclosing band loop: a
    rectangular band, so its iteration space is a product of ranges that
    flattens to one linear index.  Empty when the kernel has no parallel
    outer loop.
    """
    band: list[For] = []
    body = kernel.body
    while len(body) == 1 and isinstance(body[0], For) and body[0].parallel:
        loop = body[0]
        used = {n for a in loop.lo + loop.hi for n in a.names()}
        if used & {b.var for b in band}:
            break
        band.append(loop)
        body = loop.body
    return tuple(band)


def band_extents(band: tuple[For, ...], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """The trip count of each band loop for these sizes (what the runtime sizes the grid by)."""
    counts = []
    for loop in band:
        lo = max(a.evaluate(sizes) for a in loop.lo)
        hi = min(a.evaluate(sizes) for a in loop.hi)
        counts.append(max(0, hi - lo + 1))
    return tuple(counts)


def cuda_refusal(fn: str, arg: "str | tuple[str, ...]", out: str, loc=None, source=None) -> TccError:  # noqa: ANN001
    """The error for a matrix function or product in a program compiled for target cuda."""
    args = arg if isinstance(arg, str) else ", ".join(arg)
    if fn == "matmul":
        what, library = "matrix products", "BLAS"
    else:
        what, library = "matrix functions", "LAPACK"
    return TccError(
        f"{fn}({args}) (definition '{out}') is computed by {library} on the host; the cuda target does not "
        f"support {what} yet: compile for the cpu",
        loc,
        source,
    )


def kernel_symbol(index: int, kernel: Kernel) -> str:
    return f"tcc_{index}_{_UNSAFE.sub('_', kernel.name)}"


def kernel_buffers(program: LoopProgram, kernel: Kernel) -> tuple[tuple[int, Buffer], ...]:
    """The buffers ``kernel`` stores to or reads, with their positions in ``program.buffers``.

    The kernel's body function takes only these (see "Why each kernel is two
    functions"), in the program's buffer order so the IR is deterministic.
    """
    names: set[str] = set()
    for s in walk_stmts(kernel.body):
        if isinstance(s, Store):
            names.add(s.buffer)
        elif isinstance(s, Accumulate):
            names.add(s.target)
        for e in stmt_exprs(s):
            # a 0-d read may be a let or local rather than a buffer: an extra buffer is harmless
            names.update(n.tensor for n in postorder(e) if isinstance(n, Access))
    return tuple((k, b) for k, b in enumerate(program.buffers) if b.name in names)


def kernel_shape(program: LoopProgram, kernel: Kernel) -> tuple:
    """``kernel`` with its names replaced by position: equal shapes lower to the same code.

    Buffers become their position among :func:`kernel_buffers` (with their
    shapes), loop variables and ``let``/``local`` names a token per distinct
    name in order of binding; sizes (and anything else) keep their names.
    The renaming is injective, so two kernels with equal shapes are the same
    statements up to a consistent renaming, which lowering does not see
    (names only key its lookups and name LLVM values); the buffers line up
    with the body's parameters because both follow the program's buffer order.
    """
    used = kernel_buffers(program, kernel)
    tokens: dict[str, str] = {b.name: f"\0b{k}" for k, (_, b) in enumerate(used)}
    for st in walk_stmts(kernel.body):
        name = st.var if isinstance(st, For) else st.name if isinstance(st, (Let, Local)) else None
        if name is not None and name not in tokens:
            tokens[name] = f"\0v{len(tokens)}"
    mapping = {n: Affine.var(t) for n, t in tokens.items()}

    def aff(items: tuple[Affine, ...]) -> tuple[Affine, ...]:
        return tuple(a.substitute(mapping) for a in items)

    def node(n: Expr) -> Expr:
        if isinstance(n, Access):
            return Access(tokens.get(n.tensor, n.tensor), aff(n.indices))
        if isinstance(n, Where):
            return Where(n.cond.substitute(mapping), n.then, n.other)
        return n

    def stmts(body: tuple[Stmt, ...]) -> tuple:
        out: list[tuple] = []
        for st in body:
            if isinstance(st, For):
                out.append(("for", tokens[st.var], aff(st.lo), aff(st.hi), st.parallel, stmts(st.body)))
            elif isinstance(st, If):
                out.append(("if", st.cond.substitute(mapping), stmts(st.then), stmts(st.orelse)))
            elif isinstance(st, (Let, Local)):
                value = st.value if isinstance(st, Let) else st.init
                out.append((type(st).__name__, tokens[st.name], transform(value, node)))
            elif isinstance(st, (Store, Accumulate)):
                target = st.buffer if isinstance(st, Store) else st.target
                out.append((type(st).__name__, tokens.get(target, target), aff(st.indices), transform(st.value, node)))
            else:  # an Extern kernel has no body function
                out.append(("other", id(st)))
        return tuple(out)

    return tuple((b.rank, b.shape) for _, b in used), stmts(kernel.body)


REASSOCIATE = ("never", "contiguous", "always")


def lower_program(
    program: LoopProgram,
    dtype: str = "float64",
    target: str = "cpu",
    reassociate: str = "contiguous",
    contract: bool = False,
    arch: str = "",
    ptx_version: int = 0,
) -> LLVMModule:
    """Lower every kernel of ``program`` to one LLVM function (see the module docstring).

    ``arch`` and ``ptx_version`` are for target ``cuda`` only (see
    :mod:`tcc.backends.ptx`; an empty arch is the default there).

    Deterministic: the same program and options give byte-identical IR text.
    Ill-formed L2 (an unbound name, a wrong number of indices) is a
    :class:`TccError`.
    """
    if not isinstance(program, LoopProgram):
        raise TccError(f"lower-llvm needs a loop program (L2), not {type(program).__name__}; run lower-loops first")
    if dtype not in DTYPES:
        raise TccError(f"unsupported element type '{dtype}' (expected float64 or float32)")
    if reassociate not in REASSOCIATE:
        raise TccError(f"unknown reassociate mode '{reassociate}' (expected {', '.join(REASSOCIATE)})")
    tgt = get_target(target)
    if tgt.abi == "grid":
        from tcc.backends.ptx import check_arch, default_arch

        arch = check_arch(arch or default_arch())
        if isinstance(ptx_version, bool) or not isinstance(ptx_version, int) or ptx_version < 0:
            raise TccError(f"invalid PTX version {ptx_version!r} (expected e.g. 78 for PTX ISA 7.8, or 0 for the arch's minimum)")
    elif arch or ptx_version:
        raise TccError(f"arch and ptx are options of target cuda, not of '{target}'")
    module = ir.Module(name="tcc")
    module.triple = tgt.triple
    module.data_layout = tgt.data_layout
    if tgt.abi == "grid":
        # libdevice's IEEE paths: no flushing of subnormals to zero, as on the CPU
        module.add_named_metadata("llvm.module.flags", [ir.Constant(I32, 4), "nvvm-reflect-ftz", ir.Constant(I32, 0)])
    elt = ir.DoubleType() if dtype == "float64" else ir.FloatType()
    symbols = []
    bodies: dict[tuple, ir.Function] = {}  # by kernel_shape, host target only
    for kernel in program.kernels:
        ext = kernel.extern
        if ext is not None and tgt.abi == "grid":
            raise cuda_refusal(ext.fn, ext.args, ext.out)
    for index, kernel in enumerate(program.kernels):
        if kernel.extern is not None:
            symbols.append("")  # run by the runtime on the host: no code here
            continue
        symbol = kernel_symbol(index, kernel)
        _KernelLowering(module, program, kernel, symbol, elt, dtype, tgt, reassociate, contract).run(bodies)
        symbols.append(symbol)
    return LLVMModule(module, program, dtype, target, tuple(symbols), arch, ptx_version)


# ---------------------------------------------------------------------------
# Kernel lowering
# ---------------------------------------------------------------------------


class _Memo:
    """Values already computed for the statement being lowered.

    A stack of scopes: a ``where`` branch pushes one, so nothing computed in
    a branch is reused after the merge, where it would not dominate.  The
    memo never outlives a statement, because a later statement may see
    different memory (a store or accumulation in between).
    """

    def __init__(self) -> None:
        self.scopes: list[dict] = [{}]

    def get(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def put(self, key, value) -> None:
        self.scopes[-1][key] = value


# how a scalar name is bound: ("let", value) or ("local", alloca)
Scalars = Mapping[str, tuple[str, ir.Value]]


class _KernelLowering:
    def __init__(
        self,
        module: ir.Module,
        program: LoopProgram,
        kernel: Kernel,
        symbol: str,
        elt: ir.Type,
        dtype: str,
        target: Target,
        reassociate: str,
        contract: bool = False,
    ) -> None:
        self.module = module
        self.program = program
        self.kernel = kernel
        self.symbol = symbol
        self.elt = elt
        self.dtype = dtype
        self.target = target
        self.reassociate = reassociate
        self.loop_vars: list[str] = []
        # a*b + c may become one fused multiply-add (one rounding instead of two)
        self.arith_flags: tuple[str, ...] = ("contract",) if contract else ()
        self.where = f"kernel '{kernel.name}'"

    # -- functions --------------------------------------------------------
    def run(self, bodies: dict[tuple, ir.Function]) -> None:
        """Lower the kernel; on the host, reuse a body in ``bodies`` of the same :func:`kernel_shape`."""
        if self.target.abi == "host":
            shape = kernel_shape(self.program, self.kernel)
            body = bodies.get(shape)
            if body is None:
                body = bodies[shape] = self.build_body()
            else:
                self.used = kernel_buffers(self.program, self.kernel)
                if "noinline" not in body.attributes:
                    body.attributes.discard("alwaysinline")
                    body.attributes.add("noinline")
            self.build_entry(body)
            return
        body = self.build_body()
        if self.target.abi == "grid":
            self.build_kernel_entry(body)
        else:
            self.build_simulator_entry(body)

    def build_kernel_entry(self, body: ir.Function) -> None:
        """The PTX kernel: buffers and sizes as parameters, thread indices from special registers."""
        nb, ns = len(self.program.buffers), len(self.program.sizes)
        fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR] * nb + [I64] * ns), self.symbol)
        fn.calling_convention = "ptx_kernel"
        fn.attributes.add("nounwind")
        for k, arg in enumerate(fn.args):
            if k < nb:
                arg.name = fn.scope.deduplicate(self.program.buffers[k].name)
                arg.add_attribute("noalias")
            else:
                arg.name = fn.scope.deduplicate(self.program.sizes[k - nb])
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ids = []
        for reg in ("tid.x", "ntid.x", "ctaid.x", "nctaid.x"):
            sreg = self.module.declare_intrinsic(f"llvm.nvvm.read.ptx.sreg.{reg}", (), ir.FunctionType(I32, []))
            ids.append(b.zext(b.call(sreg, [], name=reg.replace(".x", "")), I64))
        used = [fn.args[k] for k, _ in self.used]
        b.call(body, used + list(fn.args[nb:]) + ids)
        b.ret_void()

    def build_simulator_entry(self, body: ir.Function) -> None:
        """The host-ABI entry of ``cuda-sim``: ``part``/``nparts`` are the block and thread counts."""
        fnty = ir.FunctionType(VOID, [PTR, PTR, I64, I64])
        fn = ir.Function(self.module, fnty, self.symbol)
        fn.attributes.add("nounwind")
        for arg, name in zip(fn.args, ("bufs", "sizes", "nblocks", "nthreads")):
            arg.name = name
        bufs, sizes, nblocks, nthreads = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = self.unpack_arguments(b, fn, bufs, sizes)
        self.b, saved = b, getattr(self, "b", None)
        self.fn, saved_fn = fn, self.fn

        zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)

        def threads(block: ir.Value) -> None:
            self.counted_loop("thread", zero, nthreads, one, lambda t: b.call(body, args + [t, nthreads, block, nblocks]))

        self.counted_loop("block", zero, nblocks, one, threads)
        b.ret_void()
        self.b, self.fn = saved, saved_fn

    def counted_loop(self, name: str, start: ir.Value, stop: ir.Value, step: ir.Value, emit) -> None:
        """``for v = start; v < stop; v += step: emit(v)`` at the builder's position (``step > 0``)."""
        b = self.b
        head = b.block
        body = self.fn.append_basic_block(f"{name}.body")
        exit_ = self.fn.append_basic_block(f"{name}.exit")
        b.cbranch(b.icmp_signed("<", start, stop), body, exit_)
        b.position_at_end(body)
        v = b.phi(I64, name=name)
        v.add_incoming(start, head)
        emit(v)
        nxt = b.add(v, step, name=f"{name}.next", flags=("nsw",))
        v.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_signed("<", nxt, stop), body, exit_)
        b.position_at_end(exit_)

    def trip_count(self, lo: ir.Value, hi: ir.Value, name: str) -> ir.Value:
        """How many times ``lo..hi`` (inclusive) runs: ``max(hi - lo + 1, 0)``."""
        return self.intrinsic_call("llvm.smax", self.iadd(self.isub(hi, lo), 1), ir.Constant(I64, 0), name=name)

    def build_entry(self, body: ir.Function) -> None:
        fnty = ir.FunctionType(VOID, [PTR, PTR, I64, I64])
        fn = ir.Function(self.module, fnty, self.symbol)
        fn.attributes.add("nounwind")
        for arg, name in zip(fn.args, ("bufs", "sizes", "part", "nparts")):
            arg.name = name
        bufs, sizes, part, nparts = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.call(body, self.unpack_arguments(b, fn, bufs, sizes) + [part, nparts])
        b.ret_void()

    def unpack_arguments(self, b: ir.IRBuilder, fn: ir.Function, bufs: ir.Value, sizes: ir.Value) -> list[ir.Value]:
        """Load every buffer pointer and size from the host ABI's two arrays."""
        args: list[ir.Value] = []
        for k, buf in self.used:
            slot = b.gep(bufs, [ir.Constant(I64, k)], inbounds=True, source_etype=PTR)
            args.append(b.load(slot, name=fn.scope.deduplicate(buf.name), typ=PTR))
        for k, size in enumerate(self.program.sizes):
            slot = b.gep(sizes, [ir.Constant(I64, k)], inbounds=True, source_etype=I64)
            args.append(b.load(slot, name=fn.scope.deduplicate(size), typ=I64))
        return args

    def build_body(self) -> ir.Function:
        self.used = kernel_buffers(self.program, self.kernel)
        nb, ns = len(self.used), len(self.program.sizes)
        grid = self.target.abi != "host"
        fnty = ir.FunctionType(VOID, [PTR] * nb + [I64] * ns + [I64] * (4 if grid else 2))
        fn = ir.Function(self.module, fnty, self.symbol + ".body")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("alwaysinline")
        self.fn = fn
        self.bufs: dict[str, tuple[ir.Value, int]] = {}
        for (_, buf), arg in zip(self.used, fn.args[:nb]):
            arg.name = fn.scope.deduplicate(buf.name)
            arg.add_attribute("noalias")
            self.bufs[buf.name] = (arg, buf.rank)
        self.sizes: dict[str, ir.Value] = {}
        for size, arg in zip(self.program.sizes, fn.args[nb : nb + ns]):
            arg.name = fn.scope.deduplicate(size)
            self.sizes[size] = arg
        extra = fn.args[nb + ns :]
        for arg, name in zip(extra, ("tid", "ntid", "ctaid", "nctaid") if grid else ("part", "nparts")):
            arg.name = fn.scope.deduplicate(name)
        if not grid:
            self.part, self.nparts = extra

        # Allocas go in a block of their own so that every Local's alloca is
        # in the entry block (what mem2reg/SROA promote) whatever comes later.
        self.allocas = ir.IRBuilder(fn.append_basic_block("entry"))
        start = fn.append_basic_block("start")
        self.b = ir.IRBuilder(start)
        self.memo = _Memo()
        self.dims: dict[str, list[ir.Value]] = {}
        for _, buf in self.used:
            self.dims[buf.name] = [self.affine(d, {}) for d in buf.shape[1:]]
        par = self.kernel.parallel_loop
        if grid:
            self.lower_grid(*extra)
        elif par is not None:
            self.lower_for(par, {}, {}, chunked=True)
        else:
            self.lower_block(self.kernel.body, {}, {})
        self.b.ret_void()
        self.allocas.branch(start)
        return fn

    # -- statements -------------------------------------------------------
    def lower_block(self, body: tuple[Stmt, ...], idx: dict[str, ir.Value], scalars: dict) -> None:
        scalars = dict(scalars)  # names bound inside stay inside
        for s in body:
            self.memo = _Memo()
            if isinstance(s, For):
                self.lower_for(s, idx, scalars)
            elif isinstance(s, Let):
                value = self.expr(s.value, idx, scalars)
                if isinstance(value, ir.Instruction) and value.name.startswith("."):
                    value.name = s.name  # an unnamed value: name it after the let, for readable dumps
                scalars[s.name] = ("let", value)
            elif isinstance(s, Local):
                slot = self.allocas.alloca(self.elt, name=s.name)
                self.b.store(self.expr(s.init, idx, scalars), slot)
                scalars[s.name] = ("local", slot)
            elif isinstance(s, Store):
                value = self.expr(s.value, idx, scalars)
                self.b.store(value, self.target_address(s.buffer, s.indices, idx, scalars))
            elif isinstance(s, Accumulate):
                value = self.expr(s.value, idx, scalars)
                addr = self.target_address(s.target, s.indices, idx, scalars)
                old = self.b.load(addr, typ=self.elt)
                self.b.store(self.b.fadd(old, value, flags=self.accumulate_flags(s) + self.arith_flags), addr)
            elif isinstance(s, If):
                self.lower_if(s, idx, scalars)
            else:
                raise TccError(f"not an L2 statement in {self.where}: {s!r}")

    def accumulate_flags(self, s: Accumulate) -> tuple[str, ...]:
        """``reassoc`` where the ``reassociate`` mode allows it (see the module docstring)."""
        if self.reassociate == "always":
            return ("reassoc",)
        if self.reassociate == "never" or s.indices or not self.loop_vars:
            return ()
        var = self.loop_vars[-1]
        unit = False
        for n in postorder(s.value):
            if not isinstance(n, Access) or not n.indices:
                continue
            if any(var in ix.names() for ix in n.indices[:-1]):
                return ()
            last = n.indices[-1]
            if var in last.names():
                inside_division = any(
                    isinstance(a, (FloorDiv, Mod)) and var in a.num.names() for a in last.atoms()
                )
                if abs(last.coeff(var)) > 2 or inside_division:
                    return ()
                unit = True
        return ("reassoc",) if unit else ()

    def lower_for(self, s: For, idx: dict, scalars: dict, chunked: bool = False) -> None:
        b = self.b
        lo = self.bound(s.lo, idx, "smax")
        hi = self.bound(s.hi, idx, "smin")
        if chunked:
            lo, hi = self.chunk(lo, hi)
        guard = b.icmp_signed("<=", lo, hi, name=f"{s.var}.any")
        pre = self.fn.append_basic_block(f"{s.var}.pre")
        body = self.fn.append_basic_block(f"{s.var}.body")
        exit_ = self.fn.append_basic_block(f"{s.var}.exit")
        b.cbranch(guard, pre, exit_)
        b.position_at_end(pre)
        b.branch(body)
        b.position_at_end(body)
        iv = b.phi(I64, name=s.var)
        iv.add_incoming(lo, pre)
        self.loop_vars.append(s.var)
        self.lower_block(s.body, {**idx, s.var: iv}, scalars)
        self.loop_vars.pop()
        nxt = self.iadd(iv, 1, name=f"{s.var}.next")
        more = b.icmp_signed("<=", nxt, hi, name=f"{s.var}.more")
        iv.add_incoming(nxt, b.block)
        b.cbranch(more, body, exit_)
        b.position_at_end(exit_)

    def lower_grid(self, tid: ir.Value, ntid: ir.Value, ctaid: ir.Value, nctaid: ir.Value) -> None:
        """The kernel body as one GPU thread runs it (see "Grid kernels" in the module docstring)."""
        b = self.b
        band = grid_band(self.kernel)
        gid = self.iadd(b.mul(ctaid, ntid, flags=("nuw", "nsw")), tid, name="gid")
        if not band:
            first = b.icmp_signed("==", gid, ir.Constant(I64, 0), name="thread0")
            then = self.fn.append_basic_block("thread0.body")
            done = self.fn.append_basic_block("thread0.end")
            b.cbranch(first, then, done)
            b.position_at_end(then)
            self.lower_block(self.kernel.body, {}, {})
            b.branch(done)
            b.position_at_end(done)
            return
        starts, counts = [], []
        total: ir.Value = ir.Constant(I64, 1)
        for loop in band:
            lo = self.bound(loop.lo, {}, "smax")
            hi = self.bound(loop.hi, {}, "smin")
            count = self.trip_count(lo, hi, f"{loop.var}.count")
            starts.append(lo)
            counts.append(count)
            total = self.imul(total, count)
        stride = b.mul(nctaid, ntid, flags=("nuw", "nsw"), name="stride")

        def iteration(linear: ir.Value) -> None:
            idx: dict[str, ir.Value] = {}
            rest = linear
            for k in range(len(band) - 1, -1, -1):  # the last band loop varies fastest
                if k == 0:
                    offset = rest
                else:
                    offset = b.urem(rest, counts[k])
                    rest = b.udiv(rest, counts[k])
                idx[band[k].var] = self.iadd(starts[k], offset, name=band[k].var)
            self.loop_vars.extend(loop.var for loop in band)
            self.lower_block(band[-1].body, idx, {})
            del self.loop_vars[-len(band):]

        self.counted_loop("linear", gid, total, stride, iteration)

    def chunk(self, lo: ir.Value, hi: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Chunk ``part`` of ``nparts`` of ``lo..hi``: ``ceil(count / nparts)`` iterations each."""
        b = self.b
        # nparts < 1 would divide by zero; treat it as one part rather than crash
        nparts = self.intrinsic_call("llvm.smax", self.nparts, ir.Constant(I64, 1))
        count = self.trip_count(lo, hi, "count")
        per = b.sdiv(self.isub(self.iadd(count, nparts), 1), nparts, name="chunk")
        first = self.iadd(lo, b.mul(self.part, per, flags=("nsw",)), name="first")
        last = self.isub(self.iadd(first, per), 1)
        return first, self.intrinsic_call("llvm.smin", last, hi, name="last")

    def iadd(self, x: ir.Value, y: ir.Value | int, name: str = "") -> ir.Value:
        """``x + y`` in i64, folding constants so the unoptimised dumps stay readable."""
        if isinstance(y, int):
            y = ir.Constant(I64, y)
        if isinstance(x, ir.Constant) and isinstance(y, ir.Constant):
            return ir.Constant(I64, x.constant + y.constant)
        if isinstance(y, ir.Constant) and y.constant == 0:
            return x
        if isinstance(x, ir.Constant) and x.constant == 0:
            return y
        return self.b.add(x, y, name=name, flags=("nsw",))

    def isub(self, x: ir.Value, y: ir.Value | int) -> ir.Value:
        if isinstance(y, int):
            y = ir.Constant(I64, y)
        if isinstance(y, ir.Constant):
            return self.iadd(x, ir.Constant(I64, -y.constant))
        return self.b.sub(x, y, flags=("nsw",))

    def imul(self, x: ir.Value, y: ir.Value | int) -> ir.Value:
        if isinstance(y, int):
            y = ir.Constant(I64, y)
        if isinstance(x, ir.Constant) and isinstance(y, ir.Constant):
            return ir.Constant(I64, x.constant * y.constant)
        if isinstance(y, ir.Constant) and y.constant == 1:
            return x
        if isinstance(x, ir.Constant) and x.constant == 1:
            return y
        return self.b.mul(x, y, flags=("nsw",))

    def lower_if(self, s: If, idx: dict, scalars: dict) -> None:
        b = self.b
        cond = self.cond(s.cond, idx)
        then = self.fn.append_basic_block("if.then")
        orelse = self.fn.append_basic_block("if.else") if s.orelse else None
        merge = self.fn.append_basic_block("if.end")
        b.cbranch(cond, then, orelse or merge)
        b.position_at_end(then)
        self.lower_block(s.then, idx, scalars)
        b.branch(merge)
        if orelse is not None:
            b.position_at_end(orelse)
            self.lower_block(s.orelse, idx, scalars)
            b.branch(merge)
        b.position_at_end(merge)

    def target_address(self, name: str, indices: tuple[Affine, ...], idx: dict, scalars: Scalars) -> ir.Value:
        """Where a store or accumulation goes: a Local's slot or a buffer element."""
        if not indices and name in scalars:
            kind, slot = scalars[name]
            if kind != "local":
                raise TccError(f"'{name}' is a let in {self.where} and cannot be assigned")
            return slot
        return self.address(name, indices, idx)

    # -- index arithmetic -------------------------------------------------
    def bound(self, items: tuple[Affine, ...], idx: dict, fn: str) -> ir.Value:
        value = self.affine(items[0], idx)
        for a in items[1:]:
            value = self.intrinsic_call(f"llvm.{fn}", value, self.affine(a, idx))
        return value

    def intrinsic_call(self, intrinsic: str, *args: ir.Value, name: str = "") -> ir.Value:
        ty = args[0].type
        fn = self.module.declare_intrinsic(intrinsic, [ty], ir.FunctionType(ty, [ty] * len(args)))
        return self.b.call(fn, list(args), name=name)

    def affine(self, a: Affine, idx: Mapping[str, ir.Value]) -> ir.Value:
        key = ("affine", a)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        # The i64 arithmetic below is `nsw`: an overflow would be undefined,
        # so an expression that could overflow is refused, as the interpreter
        # refuses it (tcc.sizes: the range of index arithmetic).
        check_index_range(a, self.where)
        total: ir.Value = ir.Constant(I64, 0)
        for atom, coeff in a.terms:
            v = self.atom(atom, idx)
            if coeff == -1 and not (isinstance(total, ir.Constant) and total.constant == 0):
                total = self.isub(total, v)
            else:
                total = self.iadd(total, self.imul(v, coeff))
        total = self.iadd(total, a.const)
        self.memo.put(key, total)
        return total

    def atom(self, atom, idx: Mapping[str, ir.Value]) -> ir.Value:
        if isinstance(atom, str):
            v = idx.get(atom)
            if v is None:
                v = self.sizes.get(atom)
            if v is None:
                raise TccError(f"index name '{atom}' is not bound in {self.where}")
            return v
        b = self.b
        num = self.affine(atom.num, idx)
        d = atom.den
        if d <= 0:  # pragma: no cover - Affine.floordiv/mod refuse these
            raise TccError(f"division by the non-positive constant {d} in {self.where}")
        pow2 = d & (d - 1) == 0
        if isinstance(atom, FloorDiv):
            if pow2:  # an arithmetic shift rounds toward -inf, as floor division must
                return b.ashr(num, ir.Constant(I64, d.bit_length() - 1))
            q = b.sdiv(num, ir.Constant(I64, d))
            r = b.srem(num, ir.Constant(I64, d))
            neg = b.icmp_signed("<", r, ir.Constant(I64, 0))
            return b.sub(q, b.zext(neg, I64))
        if isinstance(atom, Mod):
            if pow2:  # two's complement: the low bits are the non-negative remainder
                return b.and_(num, ir.Constant(I64, d - 1))
            r = b.srem(num, ir.Constant(I64, d))
            neg = b.icmp_signed("<", r, ir.Constant(I64, 0))
            return b.select(neg, b.add(r, ir.Constant(I64, d)), r)
        raise TccError(f"not an index atom in {self.where}: {atom!r}")  # pragma: no cover

    def cond(self, c: Cond, idx: Mapping[str, ir.Value]) -> ir.Value:
        b = self.b
        if isinstance(c, Compare):
            return b.icmp_signed(c.op, self.affine(c.lhs, idx), self.affine(c.rhs, idx))
        if isinstance(c, (And, Or)):
            parts = [self.cond(p, idx) for p in c.parts]
            out = parts[0]
            for p in parts[1:]:
                out = b.and_(out, p) if isinstance(c, And) else b.or_(out, p)
            return out
        if isinstance(c, Not):
            return b.not_(self.cond(c.part, idx))
        raise TccError(f"not an index condition in {self.where}: {c!r}")

    def address(self, name: str, indices: tuple[Affine, ...], idx: Mapping[str, ir.Value]) -> ir.Value:
        """Row-major element address; a 0-d buffer is its one element."""
        entry = self.bufs.get(name)
        if entry is None:
            raise TccError(f"'{name}' is not a buffer of the program ({self.where})")
        ptr, rank = entry
        if len(indices) != rank:
            raise TccError(f"{self.where} indexes '{name}' with {len(indices)} indices but it has {rank} dimensions")
        if not indices:
            return ptr
        lin = self.affine(indices[0], idx)
        for dim, ix in zip(self.dims[name], indices[1:]):
            lin = self.iadd(self.imul(lin, dim), self.affine(ix, idx))
        return self.b.gep(ptr, [lin], inbounds=True, source_etype=self.elt)

    # -- scalar expressions -----------------------------------------------
    def expr(self, e: Expr, idx: Mapping[str, ir.Value], scalars: Scalars) -> ir.Value:
        hit = self.memo.get(("expr", id(e)))
        if hit is not None:
            return hit
        self.operands_first(e, idx, scalars)
        value = self._expr(e, idx, scalars)
        self.memo.put(("expr", id(e)), value)
        return value

    def operands_first(self, e: Expr, idx: Mapping[str, ir.Value], scalars: Scalars) -> None:
        """Lower the arithmetic below ``e`` bottom-up, with an explicit stack.

        A flat sum of many terms is a tree as deep as it is long, too deep for
        the recursive lowering of ``_expr``.  Lowering the operands of ``+``,
        ``*``, functions, ... first, in the order the recursion would take
        (left to right, children before parents, each shared node once),
        leaves ``_expr`` only memo hits one level down, so the instructions
        are the same and recursion stays shallow.  A ``where`` is lowered as a
        whole at its place: its branches may have to go in blocks of their own.
        """
        seen: set[int] = set()
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            node, ready = stack.pop()
            if ready:
                if node is not e:
                    self.expr(node, idx, scalars)
                continue
            if id(node) in seen or (node is not e and self.memo.get(("expr", id(node))) is not None):
                continue
            seen.add(id(node))
            stack.append((node, True))
            if isinstance(node, Unary):
                stack.append((node.operand, False))
            elif isinstance(node, Binary):
                if not (node.op == "**" and _small_int(node.rhs) is not None):  # x**n never lowers n
                    stack.append((node.rhs, False))
                stack.append((node.lhs, False))

    def const(self, v: float) -> ir.Constant:
        return ir.Constant(self.elt, float(v))

    def _expr(self, e: Expr, idx: Mapping[str, ir.Value], scalars: Scalars) -> ir.Value:
        b = self.b
        if isinstance(e, Const):
            return self.const(e.value)
        if isinstance(e, Access):
            if not e.indices and e.tensor in scalars:
                kind, v = scalars[e.tensor]
                return v if kind == "let" else b.load(v, typ=self.elt)
            return b.load(self.address(e.tensor, e.indices, idx), typ=self.elt)
        if isinstance(e, Unary):
            return self.unary(e.op, self.expr(e.operand, idx, scalars))
        if isinstance(e, Binary):
            return self.binary(e, idx, scalars)
        if isinstance(e, Where):
            return self.where_(e, idx, scalars)
        if isinstance(e, (Sum, CSum)):
            raise TccError(f"{self.where} still holds a sum; L2 expressions have none (run lower-loops)")
        raise TccError(f"cannot lower {type(e).__name__} in {self.where}")

    def binary(self, e: Binary, idx: Mapping[str, ir.Value], scalars: Scalars) -> ir.Value:
        b = self.b
        lhs = self.expr(e.lhs, idx, scalars)
        if e.op == "**":
            n = _small_int(e.rhs)
            if n is not None:
                return self.int_power(lhs, n)
            return self.math("pow", lhs, self.expr(e.rhs, idx, scalars))
        rhs = self.expr(e.rhs, idx, scalars)
        op = {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv}.get(e.op)
        if op is None:
            raise TccError(f"unknown operator '{e.op}' in {self.where}")
        return op(lhs, rhs, flags=self.arith_flags)

    def int_power(self, x: ir.Value, n: int) -> ir.Value:
        """``x ** n`` by squaring and multiplying; ``1 / x ** -n`` for negative n."""
        b = self.b
        k = abs(n)
        result: ir.Value | None = None
        base = x
        while k:
            if k & 1:
                result = base if result is None else b.fmul(result, base)
            k >>= 1
            if k:
                base = b.fmul(base, base)
        if result is None:
            return self.const(1.0)
        return b.fdiv(self.const(1.0), result) if n < 0 else result

    def unary(self, op: str, x: ir.Value) -> ir.Value:
        b = self.b
        zero, one = self.const(0.0), self.const(1.0)
        if op == "neg":
            return b.fneg(x)
        if op == "abs":
            return self.math("fabs", x)
        if op == "sign":
            # sign(-0) is +0, as in the interpreter (np.sign): a zero of either
            # sign compares equal to 0 and is replaced by the constant; NaN
            # compares false everywhere and passes through.
            rest = b.select(b.fcmp_ordered("==", x, zero), zero, x)
            neg = b.select(b.fcmp_ordered("<", x, zero), self.const(-1.0), rest)
            return b.select(b.fcmp_ordered(">", x, zero), one, neg)
        if op == "relu":
            # relu(-0) is +0 (np.maximum(-0., 0.) is +0): `<=` catches -0 as well;
            # NaN stays NaN, as np.maximum(x, 0) keeps it.
            return b.select(b.fcmp_ordered("<=", x, zero), zero, x)
        if op == "sigmoid":  # exp(-|x|) never overflows; the interpreter's form
            e = self.math("exp", b.fneg(self.math("fabs", x)))
            d = b.fadd(one, e)
            return b.select(b.fcmp_ordered(">=", x, zero), b.fdiv(one, d), b.fdiv(e, d))
        if op in ("exp", "log", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh"):
            return self.math(op, x)
        raise TccError(f"unknown function '{op}' in {self.where}")

    def math(self, fn: str, *args: ir.Value) -> ir.Value:
        """A math function: an LLVM intrinsic where the target has one, else the library's."""
        fn = _MATH_NAMES.get(fn, fn)
        if fn == "exp" and self.target.inline_exp:
            from tcc.backends.vector_math import emit_exp

            return emit_exp(self.b, self.module, args[0], self.dtype)
        fnty = ir.FunctionType(self.elt, [self.elt] * len(args))
        if fn in self.target.intrinsics:
            callee = self.module.declare_intrinsic(f"llvm.{fn}", [self.elt], fnty)
        else:
            symbol = self.target.math_symbol(fn, self.dtype)
            callee = self.module.globals.get(symbol)
            if callee is None:
                callee = ir.Function(self.module, fnty, symbol)
        return self.b.call(callee, list(args))

    def where_(self, e: Where, idx: Mapping[str, ir.Value], scalars: Scalars) -> ir.Value:
        b = self.b
        cond = self.cond(e.cond, idx)
        if _speculatable(e.then, scalars) and _speculatable(e.other, scalars):
            return b.select(cond, self.expr(e.then, idx, scalars), self.expr(e.other, idx, scalars))
        then = self.fn.append_basic_block("where.then")
        other = self.fn.append_basic_block("where.else")
        merge = self.fn.append_basic_block("where.end")
        b.cbranch(cond, then, other)
        values = []
        for block, branch in ((then, e.then), (other, e.other)):
            b.position_at_end(block)
            self.memo.scopes.append({})
            values.append((self.expr(branch, idx, scalars), b.block))
            self.memo.scopes.pop()
            b.branch(merge)
        b.position_at_end(merge)
        phi = b.phi(self.elt)
        for value, block in values:
            phi.add_incoming(value, block)
        return phi


# Unary operations that lower to plain instructions (or intrinsics that are
# instructions on every target), so evaluating them speculatively is harmless.
_CHEAP_UNARY = frozenset({"neg", "abs", "sign", "relu"})


def _small_int(e: Expr) -> int | None:
    if isinstance(e, Const):
        v = e.value
        if isinstance(v, float):
            if not v.is_integer():
                return None
            v = int(v)
        if abs(v) <= POW_UNROLL_LIMIT:
            return v
    return None


def _speculatable(e: Expr, scalars: Scalars) -> bool:
    """True when ``e`` has no buffer load and no call, so a select may evaluate it unconditionally."""
    for node in postorder(e):
        if isinstance(node, Access):
            if node.indices or node.tensor not in scalars:
                return False
        elif isinstance(node, Unary):
            if node.op not in _CHEAP_UNARY:
                return False
        elif isinstance(node, Binary):
            if node.op == "**" and _small_int(node.rhs) is None:
                return False
        elif not isinstance(node, (Const, Where)):
            return False
    return True
