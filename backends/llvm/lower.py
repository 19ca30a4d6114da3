"""Module set-up and the statement half of the kernel lowering: L2 kernels to LLVM functions.

:func:`lower_to_llvm` makes the module (triple, data layout, module flags of
the codegen target), refuses what the target cannot run, and lowers each
kernel to its entry and body functions (see "The kernel ABI", "Why each
kernel is two functions" and "Grid kernels" in :mod:`tcc.backends.llvm`).
:class:`_KernelLowering` builds those functions and the loops, branches,
stores and accumulations of the body; the expressions inside them are
:class:`~tcc.backends.llvm.exprs.ExprLowering`'s.
"""
from __future__ import annotations

from llvmlite import ir

from tcc.ir.diagnostics import TccError
from tcc.ir.expr import Access, Expr, postorder
from tcc.ir.index import Affine, FloorDiv, Mod, atom_names
from tcc.ir.loops import Accumulate, For, If, Kernel, Let, Local, LoopProgram, Stmt, Store

from ..target import DTYPES
from .entries import KernelEntries
from .exprs import I32, I64, PTR, VOID, ExprLowering, Scalars, _Memo
from .kernels import cuda_refusal, grid_band, kernel_buffers, kernel_shape, kernel_symbol
from .machines import CodegenTarget, check_arch, default_arch, codegen_target
from .module import LLVMModule

__all__ = ["REASSOCIATE", "lower_to_llvm"]

REASSOCIATE = ("never", "contiguous", "always")


def lower_to_llvm(
    program: LoopProgram,
    dtype: str = "float64",
    target: str = "cpu",
    reassociate: str = "contiguous",
    contract: bool = False,
    arch: str = "",
    ptx_version: int = 0,
) -> LLVMModule:
    """Lower every kernel of ``program`` to one LLVM function (see :mod:`tcc.backends.llvm`).

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
    tgt = codegen_target(target)
    if tgt.abi == "grid":
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
            raise cuda_refusal(ext.fn, ext.args, ext.out, transposed=ext.transposed)
    for index, kernel in enumerate(program.kernels):
        if kernel.extern is not None:
            symbols.append("")  # run by the runtime on the host: no code here
            continue
        symbol = kernel_symbol(index, kernel)
        _KernelLowering(module, program, kernel, symbol, elt, dtype, tgt, reassociate, contract).run(bodies)
        symbols.append(symbol)
    return LLVMModule(module, program, dtype, target, tuple(symbols), arch, ptx_version)


class _KernelLowering(KernelEntries, ExprLowering):
    """One kernel to its entry function and body function (the statements; :class:`ExprLowering` the expressions)."""

    def __init__(
        self,
        module: ir.Module,
        program: LoopProgram,
        kernel: Kernel,
        symbol: str,
        elt: ir.Type,
        dtype: str,
        target: CodegenTarget,
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
        self.shapes = {b.name: b.shape for b in program.buffers}
        self.let_exprs: dict[str, Expr] = {}  # every let lowered so far in this kernel (names are unique in it)
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

    def trip_count(self, lo: ir.Value, hi: ir.Value, name: str) -> ir.Value:
        """How many times ``lo..hi`` (inclusive) runs: ``max(hi - lo + 1, 0)``."""
        return self.intrinsic_call("llvm.smax", self.iadd(self.isub(hi, lo), 1), ir.Constant(I64, 0), name=name)

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
                self.let_exprs[s.name] = s.value  # what accumulate_flags sees through
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
        """``reassoc`` where the ``reassociate`` mode allows it (see :mod:`tcc.backends.llvm`)."""
        if self.reassociate == "always":
            return ("reassoc",)
        if self.reassociate == "never" or s.indices or not self.loop_vars:
            return ()
        var = self.loop_vars[-1]
        unit = False
        for n in self.loads_through_lets(s.value):
            indices = self.walking_indices(n)
            if any(var in ix.names() for ix in indices[:-1]):
                return ()
            last = indices[-1]
            if var in last.names():
                inside_division = any(
                    not isinstance(a, str) and var in atom_names(a) for a in last.atoms()
                )
                if abs(last.coeff(var)) > 2 or inside_division:
                    return ()
                unit = True
        return ("reassoc",) if unit else ()

    def loads_through_lets(self, value: Expr) -> list[Access]:
        """The buffer loads ``value`` makes, and those of the ``let``s it reads, transitively: after
        ``fuse-inner`` a sum reads ``let e_v = exp(0.125 * e_mm[b, i, j])`` (``s_acc += e_v``), and
        whether it walks memory is the question of ``e_mm``'s load."""
        out: list[Access] = []
        seen: set[str] = set()
        todo = [value]
        while todo:
            for n in postorder(todo.pop()):
                if not isinstance(n, Access):
                    continue
                if n.indices:
                    out.append(n)
                elif n.tensor in self.let_exprs and n.tensor not in seen:
                    seen.add(n.tensor)
                    todo.append(self.let_exprs[n.tensor])
        return out

    def walking_indices(self, n: Access) -> tuple[Affine, ...]:
        """``n``'s indices without the trailing positions of extent 1: a column ``f_rhs[c, 0]`` of an
        ``N x 1`` buffer walks memory along ``c`` with stride 1, as ``x[c]`` does."""
        shape = self.shapes.get(n.tensor)
        indices = n.indices
        while shape is not None and len(indices) > 1 and len(shape) == len(n.indices):
            ext = shape[len(indices) - 1]
            if not (ext.is_constant and ext.const == 1):
                break
            indices = indices[:-1]
        return indices

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
        """The kernel body as one GPU thread runs it (see "Grid kernels" in :mod:`tcc.backends.llvm`)."""
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
