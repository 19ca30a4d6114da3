"""The entry functions of a kernel, one per kernel ABI: host, GPU grid, and the grid simulated on the host.

A kernel is an entry that the runtime calls and an internal body that does
the work (see "The kernel ABI", "Why each kernel is two functions" and
"Grid kernels" in :mod:`tcc.backends.llvm`).  :class:`KernelEntries` builds
the entries, which only pass the body its arguments: unpacked from the host
ABI's two arrays, from the PTX kernel's parameters and special registers,
or, for ``cuda-sim``, from loops over every block and thread of a launch.
"""
from __future__ import annotations

from llvmlite import ir

from tcc.ir.loops import LoopProgram

from .exprs import I32, I64, PTR, VOID

__all__ = ["KernelEntries"]


class KernelEntries:
    """Entry functions of one kernel; mixed into the kernel lowering, whose state it reads.

    It uses ``module``, ``program``, ``symbol`` (the entry's name) and
    ``used`` (the body's buffers, :func:`~tcc.backends.llvm.kernels.kernel_buffers`);
    :meth:`counted_loop` also serves the grid-stride loop of a GPU body.
    """

    module: ir.Module
    program: LoopProgram
    symbol: str
    used: tuple
    b: ir.IRBuilder
    fn: ir.Function

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
