"""Structural checks of L2 loop programs (:mod:`tcc.ir.loops`).

:func:`verify_loops` is to L2 what :func:`tcc.ir.verifier.verify` is to L1:
it runs after every L2 pass under ``--verify-each`` (and on parsed ``.loops``
files), so a pass that builds an ill-formed loop nest is caught where it does.

**Names.** Sizes, buffers, loop variables and scalars (``let`` / ``local``)
share one namespace: a buffer may not be named like a size, a loop variable or
scalar like a size or a buffer, a loop variable may not shadow an enclosing
one, and a scalar may not take the name of an enclosing loop variable or of a
scalar already defined in the same block.  (A scalar in an inner block may
shadow one of an outer block.)  Shapes use only sizes; index expressions, loop
bounds and ``if``/``where`` conditions use only sizes and enclosing loop
variables.

**Scalars** are visible to the statements after them in their block and to
those statements' children.  A ``let`` is immutable: it is never the target of
``=`` or ``+=``.  ``name += v`` / ``name = v`` without indices write a
``local`` in scope, or else a 0-d buffer.

**Buffers.** Every access names a declared buffer with as many indices as its
rank; inputs are never written.  Scalar expressions hold no ``Sum``/``CSum``.

**External kernels.** ``extern fn(A) -> B`` is the whole body of its kernel;
``fn`` is a matrix function, ``A`` a declared buffer of rank 2 whose two
extents are the same expression, and ``B`` another buffer, not an input, of
shape ``A``'s (``inv``, ``adj``) or 0-d (``det``, ``logdet``).
``extern matmul(A, B) -> C``: ``A`` (p x q) and ``B`` (q x r) are declared
buffers of rank 2 whose inner extents are the same expression, ``C`` is
another buffer (neither ``A`` nor ``B``), not an input, of shape p x r.

**Parallel loops** must be race-free, which is checked conservatively (a
rejected loop may be fine; an accepted one is).  In ``parallel for v``:

* a ``local`` declared outside the loop is never written inside it;
* for every buffer written inside the loop there is an index position ``p``
  at which *every* access to that buffer inside the loop -- writes and reads --
  has the very same expression, and that expression is ``c*v + rest`` with
  ``c != 0``, ``v`` not inside a ``//`` or ``%`` atom, and ``rest`` free of the
  loop variables declared inside the parallel loop.  Such an expression is one
  to one in ``v`` (``rest`` is fixed while the loop runs), so iteration ``v``
  only touches elements whose ``p``-th coordinate is its own: no two
  iterations touch the same element of a written buffer.  Requiring the same
  expression at ``p`` for all writes is what makes two writes ``y[i]`` and
  ``y[i + 1]`` a race, as they are.  One relaxation: the expressions may
  differ by constants spanning less than ``|c|`` (``y[4*s]`` .. ``y[4*s + 3]``,
  what strip-mining writes): those never meet across iterations either.
  Another: ``rest`` may hold loop variables declared inside when all their
  coefficients are multiples of some ``m >= |c|`` times ``v``'s constant trip
  count (``privatize``'s rows ``P*t + p`` in ``parallel for p in 0..P-1``):
  ``c*v`` then fixes the residue mod ``m``
  (:func:`tcc.ir.loop_analysis.residue_separates`).

Errors are :class:`~tcc.diagnostics.TccError` s; when the program came from
:func:`tcc.ir.loops_parser.parse_loop_program` they carry the location of the
offending statement or buffer declaration.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence, Union

from tcc.ir.diagnostics import TccError

from .contraction import CONTRACT, contract_result
from .gram import GRAM_RANKS, gram_result
from .expr import GRAM, INDEX_VALUE, MATMUL, MATRIX_ARITY, MATRIX_FUNCTIONS, Access, CSum, Expr, Sum, Where, format_matrix_call, postorder
from .index import Affine, format_affine, lookups
from .index_range import cond_affines
from .loops import (
    ROLES,
    Accumulate,
    Buffer,
    Extern,
    For,
    If,
    Kernel,
    Let,
    Local,
    LoopProgram,
    Stmt,
    Store,
    walk_stmts,
)
from .loop_analysis import constant_trips, residue_separates, strides_with
from .diagnostics import Loc, SourceMap

if TYPE_CHECKING:
    from .polyhedra import Facts

__all__ = ["check_loop_bounds", "verify_loops"]


def verify_loops(program: LoopProgram, bounds: bool = False) -> None:
    """Raise :class:`TccError` naming the first ill-formed part of ``program``; with ``bounds``,
    also the first buffer access not proved in bounds (:func:`check_loop_bounds`).

    Bounds are asked for where a pass made the program (``--verify-each``, a
    plug-in pass's result: :mod:`tcc.instruments`).  Without them this is the
    structural check of a program as written, which needs no proof: a
    hand-written ``.loops`` file may index by facts L2 does not state (L1's
    ``assume`` lines are not carried down).
    """
    _Verifier(program).run()
    if bounds:
        check_loop_bounds(program)


def _ref(name: str, indices: tuple[Affine, ...]) -> str:
    if not indices:
        return name
    return f"{name}[{', '.join(str(i) for i in indices)}]"


#: a message fragment, or a function making it (formatted only when an error is raised)
Label = Union[str, Callable[[], str]]


def _text(label: Label) -> str:
    return label if isinstance(label, str) else label()


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


@dataclass
class _Access:
    write: bool
    buffer: str
    indices: tuple[Affine, ...]
    inner: frozenset[str]  # loop variables declared inside the parallel loop that enclose the access
    stmt: Stmt


@dataclass
class _Parallel:
    """A parallel loop being checked: its variable, depth and what its body touches."""

    var: str
    depth: int  # index of its variable in the loop-variable stack
    first_block: int  # index of its body's block in the block stack
    stmt: For
    accesses: list[_Access] = field(default_factory=list)


class _Verifier:
    def __init__(self, program: LoopProgram) -> None:
        self.p = program
        self.source = program.source if isinstance(program.source, SourceMap) else None
        self.sizes: set[str] = set()
        self.buffers: dict[str, Buffer] = {}
        self.kernel: Kernel | None = None
        self.stmt: Stmt | None = None  # the statement being checked, for the error location
        self.loop_vars: list[str] = []
        self.blocks: list[dict[str, str]] = []  # scalar name -> 'let' / 'local', innermost last
        self.kernel_scalars: set[str] = set()
        self.parallel: list[_Parallel] = []

    # -- errors -------------------------------------------------------------
    def _loc(self, node: object) -> Loc | None:
        if self.source is None or node is None:
            return None
        try:
            return self.source.nodes.get(node)
        except TypeError:  # an unhashable field: a malformed node, reported without a location
            return None

    def error(self, message: str, node: object = None) -> TccError:
        node = node if node is not None else self.stmt
        if self.kernel is not None:
            message = f"in kernel '{self.kernel.name}': {message}"
        return TccError(message, self._loc(node) or self._loc(self.kernel), self.source)

    # -- program --------------------------------------------------------------
    def run(self) -> None:
        p = self.p
        for s in p.sizes:
            if s in self.sizes:
                raise self.error(f"size '{s}' is declared twice")
            self.sizes.add(s)
        for b in p.buffers:
            if b.role not in ROLES:
                raise self.error(f"buffer '{b.name}' has an unknown role '{b.role}'", b)
            if b.name in self.buffers:
                raise self.error(f"buffer '{b.name}' is declared twice", b)
            if b.name in self.sizes:
                raise self.error(f"buffer '{b.name}' has the name of a size", b)
            for extent in b.shape:
                for n in extent.names():
                    if n not in self.sizes:
                        raise self.error(f"shape of buffer '{b.name}' uses '{n}', which is not a size", b)
            self.buffers[b.name] = b
        for k in p.kernels:
            self.kernel = k
            self.kernel_scalars = {s.name for s in walk_stmts(k.body) if isinstance(s, (Let, Local))}
            self.block(k.body)
            self.kernel = None

    # -- statements -------------------------------------------------------------
    def block(self, body: tuple[Stmt, ...]) -> None:
        self.blocks.append({})
        try:
            for s in body:
                self.stmt = s
                self.statement(s)
        finally:
            self.blocks.pop()

    def statement(self, s: Stmt) -> None:
        if isinstance(s, For):
            self.for_loop(s)
        elif isinstance(s, (Let, Local)):
            kind = "let" if isinstance(s, Let) else "local"
            self.expr(s.value if isinstance(s, Let) else s.init, lambda: f"{kind} {s.name}")
            self.define_scalar(s.name, kind)
        elif isinstance(s, (Store, Accumulate)):
            name = s.buffer if isinstance(s, Store) else s.target
            op = "=" if isinstance(s, Store) else "+="
            self.expr(s.value, lambda: f"{_ref(name, s.indices)} {op} ...")
            self.write(s, name, s.indices, op)
        elif isinstance(s, If):
            self.index_names(s.cond.names(), "the condition of an if")
            self.lookups(cond_affines(s.cond))
            self.block(s.then)
            self.stmt = s
            self.block(s.orelse)
        elif isinstance(s, Extern):
            self.extern(s)
        else:
            raise self.error(f"not an L2 statement: {type(s).__name__}")

    def for_loop(self, s: For) -> None:
        v = s.var
        if v in self.sizes:
            raise self.error(f"loop variable '{v}' has the name of a size")
        if v in self.buffers:
            raise self.error(f"loop variable '{v}' has the name of a buffer")
        if v in self.loop_vars:
            raise self.error(f"loop variable '{v}' shadows an enclosing loop variable")
        if self.scalar(v) is not None:
            raise self.error(f"loop variable '{v}' has the name of a scalar in scope")
        for b in s.lo + s.hi:
            self.index_names(b.names(), lambda: f"the bounds of loop '{v}'", own=v)
        self.lookups(s.lo + s.hi)
        if s.parallel:
            self.parallel.append(_Parallel(v, len(self.loop_vars), len(self.blocks), s))
        self.loop_vars.append(v)
        try:
            self.block(s.body)
        finally:
            self.loop_vars.pop()
        self.stmt = s
        if s.parallel:
            self.check_race(self.parallel.pop())

    def extern(self, s: Extern) -> None:
        call = str(s)
        if self.kernel is None or self.kernel.body != (s,):
            raise self.error(f"'{call}' must be the only statement of its kernel")
        if s.fn not in MATRIX_ARITY:
            raise self.error(f"unknown matrix function '{s.fn}' in '{call}'")
        if len(s.args) != MATRIX_ARITY[s.fn]:
            raise self.error(f"{s.fn} takes {_plural(MATRIX_ARITY[s.fn], 'buffer', 'buffers')}: '{call}'")
        if s.transposed and (s.fn != MATMUL or len(s.transposed) != len(s.args)):
            raise self.error(f"only matmul reads a buffer transposed: '{call}'")
        args = []
        for name in s.args:
            arg = self.buffers.get(name)
            if arg is None:
                raise self.error(f"undeclared buffer '{name}' in '{call}'")
            if s.fn == CONTRACT:
                if not s.spec or arg.rank != len(s.spec[len(args)]):
                    raise self.error(f"'{call}': '{name}' has {_plural(arg.rank, 'dimension', 'dimensions')}")
            elif s.fn == GRAM:
                if arg.rank != GRAM_RANKS[len(args)]:
                    raise self.error(f"gram needs a matrix and a vector: '{name}' has "
                                     f"{_plural(arg.rank, 'dimension', 'dimensions')}")
            elif arg.rank != 2 and not (s.fn == MATMUL and arg.rank > 2):  # matmul also takes batches
                raise self.error(f"{s.fn} needs a matrix: '{name}' has {_plural(arg.rank, 'dimension', 'dimensions')}")
            args.append(arg)
        if s.fn == CONTRACT:
            want, why = contract_result(s.spec, args[0].shape, args[1].shape)
            if why is not None:
                raise self.error(f"'{call}' is not a contraction: {why}")
        elif s.fn == GRAM:
            want, why = gram_result(*s.args, args[0].shape, args[1].shape)
            if why is not None:
                raise self.error(why)
        elif s.fn == MATMUL:
            a, b = args
            # a buffer read transposed: the product's operand has its extents reversed
            ta, tb = s.transposed or (False, False)
            ba, bb = tuple(a.shape)[:-2], tuple(b.shape)[:-2]
            if ba and bb and ba != bb:
                raise self.error(f"matmul needs '{a.name}' and '{b.name}' to have the same batch extents: '{call}'")
            ea, eb = (tuple(x.shape)[-2:][::-1] if t else tuple(x.shape)[-2:] for x, t in ((a, ta), (b, tb)))
            if ea[1] != eb[0]:
                sa = " x ".join(format_affine(e) for e in a.shape)
                sb = " x ".join(format_affine(e) for e in b.shape)
                na, nb = (f"transpose({x.name})" if t else x.name for x, t in ((a, ta), (b, tb)))
                raise self.error(
                    f"matmul needs the columns of '{na}' to match the rows of '{nb}': "
                    f"'{a.name}' is {sa}, '{b.name}' is {sb}"
                )
            want: tuple = (ba or bb) + (ea[0], eb[1])
        else:
            (arg,) = args
            if arg.shape[0] != arg.shape[1]:
                shape = " x ".join(format_affine(e) for e in arg.shape)
                raise self.error(f"{s.fn} needs a square matrix: '{arg.name}' is {shape}")
            want = arg.shape if MATRIX_FUNCTIONS[s.fn] else ()
        out = self.buffers.get(s.out)
        if out is None:
            raise self.error(f"undeclared buffer '{s.out}' in '{call}'")
        if out.role == "input":
            raise self.error(f"cannot write to input '{s.out}': {call}")
        if s.out in s.args:
            raise self.error(f"'{call}' writes the buffer it reads")
        if tuple(out.shape) != tuple(want):
            have = " x ".join(format_affine(e) for e in out.shape) or "0-d"
            need = " x ".join(format_affine(e) for e in want) or "0-d"
            raise self.error(f"'{s.out}' is {have}, but {format_matrix_call(s.fn, s.args, s.transposed, s.spec)} is {need}")

    def define_scalar(self, name: str, kind: str) -> None:
        if name in self.sizes:
            raise self.error(f"scalar '{name}' has the name of a size")
        if name in self.buffers:
            raise self.error(f"scalar '{name}' has the name of a buffer")
        if name in self.loop_vars:
            raise self.error(f"scalar '{name}' has the name of an enclosing loop variable")
        if name in self.blocks[-1]:
            raise self.error(f"scalar '{name}' is already defined in this block")
        self.blocks[-1][name] = kind

    def scalar(self, name: str) -> tuple[str, int] | None:
        """The kind of the scalar ``name`` in scope and the index of its block."""
        for i in range(len(self.blocks) - 1, -1, -1):
            kind = self.blocks[i].get(name)
            if kind is not None:
                return kind, i
        return None

    # -- names ----------------------------------------------------------------
    def index_names(self, names: tuple[str, ...], where: Label, own: str | None = None) -> None:
        for n in names:
            if n in self.sizes or n in self.loop_vars:
                continue
            why = ""
            if n == own:
                why = " (a loop's bounds cannot use its own variable)"
            elif n in self.buffers:
                why = " (it is a buffer)"
            elif self.scalar(n) is not None:
                why = " (it is a scalar)"
            raise self.error(f"'{n}' in {_text(where)} is not a size or an enclosing loop variable{why}")

    def not_a_buffer(self, name: str, ref: str) -> TccError:
        if self.scalar(name) is not None:
            return self.error(f"scalar '{name}' cannot be indexed: {ref}")
        if name in self.sizes:
            return self.error(f"'{name}' is a size, not a buffer: {ref}")
        if name in self.loop_vars:
            return self.error(f"'{name}' is a loop variable, not a buffer: {ref}")
        return self.error(f"undeclared buffer '{name}' in {ref}")

    def unknown_scalar(self, name: str) -> TccError:
        if name in self.sizes:
            return self.error(f"'{name}' is a size; sizes can only appear inside [...]")
        if name in self.loop_vars:
            return self.error(f"'{name}' is a loop variable; loop variables can only appear inside [...]")
        if name in self.kernel_scalars:
            return self.error(f"scalar '{name}' is used outside its scope or before its definition")
        return self.error(f"undeclared name '{name}'")

    def buffer_access(self, name: str, indices: tuple[Affine, ...]) -> Buffer:
        buf = self.buffers.get(name)
        ref = lambda: _ref(name, indices)  # noqa: E731 - only formatted for an error
        if buf is None:
            raise self.not_a_buffer(name, ref()) if indices else self.unknown_scalar(name)
        if len(indices) != buf.rank:
            raise self.error(
                f"'{name}' has {_plural(buf.rank, 'dimension', 'dimensions')}"
                f" but {ref()} gives {_plural(len(indices), 'index', 'indices')}"
            )
        for ix in indices:
            self.index_names(ix.names(), lambda: f"the index of {ref()}")
        self.lookups(indices)
        return buf

    def lookups(self, affines: "tuple[Affine, ...] | list[Affine]") -> None:
        """Reads inside index expressions (``tok[i]``) are of index buffers, with their rank."""
        for a in affines:
            for lk in lookups(a):
                buf = self.buffers.get(lk.tensor)
                if buf is None or buf.bound is None:
                    raise self.error(f"'{lk.tensor}' is read inside an index ({lk}) but is not an index buffer")
                if len(lk.indices) != buf.rank:
                    raise self.error(f"'{lk.tensor}' has {_plural(buf.rank, 'dimension', 'dimensions')} but {lk} "
                                     f"gives {_plural(len(lk.indices), 'index', 'indices')}")

    # -- expressions and writes -------------------------------------------------
    def expr(self, e: Expr, label: Label) -> None:
        if not isinstance(e, Expr):
            raise self.error(f"the value of '{_text(label)}' is not an expression: {e!r}")
        nodes = postorder(e)
        if any(isinstance(node, (Sum, CSum)) for node in nodes):
            raise self.error(f"sum in the value of '{_text(label)}': L2 expressions cannot contain sums")
        for node in nodes:
            if isinstance(node, Where):
                cond = node.cond
                self.index_names(cond.names(), lambda: f"the condition of where({cond}, ...)")
            elif isinstance(node, Access):
                if not node.indices and self.scalar(node.tensor) is not None:
                    continue
                if node.tensor == INDEX_VALUE:
                    self.index_names(node.indices[0].names(), lambda: f"the value {node}")
                    continue
                if getattr(self.buffers.get(node.tensor), "bound", None) is not None:
                    raise self.error(f"index buffer '{node.tensor}' holds integers: it is read only inside "
                                     f"index expressions, not as the value {node}")
                self.buffer_access(node.tensor, node.indices)
                self.record(False, node.tensor, node.indices)

    def write(self, s: Stmt, name: str, indices: tuple[Affine, ...], op: str) -> None:
        ref = _ref(name, indices)
        found = self.scalar(name)
        if found is not None:
            kind, block = found
            if indices:
                raise self.error(f"scalar '{name}' cannot be indexed: {ref}")
            if kind == "let":
                verb = "store to" if op == "=" else "accumulate into"
                raise self.error(f"cannot {verb} '{name}': it is a 'let' (only a 'local' can change)")
            for par in self.parallel:
                if block < par.first_block:
                    raise self.error(
                        f"parallel loop '{par.var}' may race: it writes local '{name}', which is declared outside it"
                    )
            return
        if any(lookups(ix) for ix in indices):
            raise self.error(f"cannot write through an index array: {ref} {op} ... (only reads are indirect)")
        buf = self.buffer_access(name, indices)
        if buf.role == "input":
            raise self.error(f"cannot write to input '{name}': {ref} {op} ...")
        self.record(True, name, indices)

    def record(self, write: bool, name: str, indices: tuple[Affine, ...]) -> None:
        for par in self.parallel:
            inner = frozenset(self.loop_vars[par.depth + 1:])
            par.accesses.append(_Access(write, name, indices, inner, self.stmt))

    # -- parallel loops -----------------------------------------------------------
    def check_race(self, par: _Parallel) -> None:
        v = par.var
        by_buffer: dict[str, list[_Access]] = {}
        for a in par.accesses:
            by_buffer.setdefault(a.buffer, []).append(a)
        for name, accesses in by_buffer.items():
            writes = [a for a in accesses if a.write]
            if not writes:
                continue
            first = writes[0]
            ref = _ref(name, first.indices)
            if not first.indices:
                raise self.error(
                    f"parallel loop '{v}' may race: every iteration writes the 0-d buffer '{name}'", first.stmt
                )
            trips = constant_trips(par.stmt)
            candidates = [p for p, ix in enumerate(first.indices)
                          if _separates(ix, v, first.inner) or residue_separates(ix, v, trips, first.inner)]
            if not candidates:
                raise self.error(
                    f"parallel loop '{v}' may race: no index of {ref} is '{v}' times a nonzero constant"
                    f" plus terms free of '{v}' and of the loop variables inside the loop",
                    first.stmt,
                )
            for a in accesses:
                candidates = [p for p in candidates if _same_strip(a.indices[p], first.indices[p], v, accesses, p)]
                if not candidates:
                    other = _ref(name, a.indices)
                    what = "written" if a.write else "read"
                    raise self.error(
                        f"parallel loop '{v}' may race: {ref} is written and {other} {what};"
                        f" they may touch the same element of '{name}' in different iterations",
                        a.stmt,
                    )


def _same_strip(ix: Affine, first: Affine, var: str, accesses: list, p: int) -> bool:
    """``ix`` is ``first`` plus a constant, and all accesses' constants at ``p`` span less than ``|c|``.

    ``c*v + r + d_k`` for constants ``d_k`` with ``max d - min d < |c|`` never
    meet across iterations (strip-mined code writes ``y[4*s]`` .. ``y[4*s + 3]``).
    """
    if ix == first:
        return True
    offsets = []
    for a in accesses:
        d = a.indices[p] - first
        if not d.is_constant:
            return False
        offsets.append(d.const)
    return max(offsets + [0]) - min(offsets + [0]) < abs(first.coeff(var))


def _separates(ix: Affine, var: str, inner: frozenset[str]) -> bool:
    """``ix`` is ``c*var + rest`` with ``c != 0`` and ``rest`` free of ``var`` and of ``inner``."""
    return strides_with(ix, var) and not (set(ix.names()) - {var}) & inner


# ---------------------------------------------------------------------------
# Bounds
# ---------------------------------------------------------------------------


def check_loop_bounds(program: LoopProgram) -> None:
    """Prove every buffer access of ``program`` within its buffer's extents; raise a located
    :class:`TccError` for the first one not proved.

    L2 is what ``lower-llvm`` compiles, and compiled code does not check an
    index: a read past a buffer is garbage or a segfault, a write past it
    heap corruption.  So an L2 pass (one of tcc's under ``--verify-each``, a
    plug-in's by default) that moves an access out of bounds must be stopped
    here.  The proof is the one the L1 verifier makes
    (:mod:`tcc.ir.bounds`), over the facts of the access's position: sizes
    are non-negative, each enclosing ``for v in max(lo...)..min(hi...)``
    gives ``v >= lo`` and ``v <= hi`` for each bound, an enclosing ``if``
    its condition (``else``: the negation), an enclosing ``where`` likewise
    for its lazily evaluated branches, and an index buffer's entry lies in
    its declared ``0..bound``.  Every index ``e`` of a read or a write
    (loads, stores, ``+=``, and reads of index buffers inside indices, loop
    bounds and conditions) must satisfy ``0 <= e <= extent - 1``.  Sound: a
    "proved" is a Fourier-Motzkin proof over the integers, so an access that
    can leave its buffer is never accepted (an access that cannot, but whose
    safety needs more than these facts, is refused).  External kernels read
    and write whole buffers of checked shapes and have no indices to check.

    Call it on a program :func:`verify_loops` has checked otherwise (every
    name declared, every rank right).
    """
    _BoundsChecker(program).run()


class _NoSource:
    """The program and definition :func:`tcc.ir.bounds.out_of_bounds_error` reads locations
    from, for an L2 access: none (the L2 checker locates the statement itself)."""

    source = None
    loc = None

    def loc_of(self, node: object) -> None:
        return None


class _BoundsChecker:
    def __init__(self, program: LoopProgram) -> None:
        from .polyhedra import program_facts

        self.p = program
        self.source = program.source if isinstance(program.source, SourceMap) else None
        self.sizes = list(program.sizes)
        self.shapes = {b.name: b.shape for b in program.buffers}
        self.base = program_facts(self.sizes)
        self.kernel: Kernel | None = None

    def run(self) -> None:
        for k in self.p.kernels:
            if k.extern is not None:
                continue
            self.kernel = k
            self.block(k.body, self.base)

    def block(self, body: tuple[Stmt, ...], facts: "Facts") -> None:
        from tcc.ir.index import negate

        for s in body:
            if isinstance(s, For):
                self.lookups(s.lo + s.hi, facts, s)
                self.block(s.body, facts.with_range(s.var, s.lo, s.hi))
            elif isinstance(s, If):
                self.lookups(cond_affines(s.cond), facts, s)
                self.block(s.then, facts.with_cond(s.cond))
                self.block(s.orelse, facts.with_cond(negate(s.cond)))
            elif isinstance(s, (Let, Local)):
                self.expr(s.value if isinstance(s, Let) else s.init, facts, s)
            elif isinstance(s, (Store, Accumulate)):
                self.expr(s.value, facts, s)
                name = s.buffer if isinstance(s, Store) else s.target
                if s.indices and name in self.shapes:
                    self.access(Access(name, s.indices), facts, s)
                    self.lookups(s.indices, facts, s)

    def expr(self, e: Expr, facts: "Facts", stmt: Stmt) -> None:
        from .bounds import facts_at, uses

        for use in uses(e):  # every load, and every index-buffer read inside an index, with its where guards
            if use.access.tensor in self.shapes and use.access.indices:
                self.access(use.access, facts_at(facts, use), stmt)

    def lookups(self, affines: Sequence[Affine], facts: "Facts", stmt: Stmt) -> None:
        for a in affines:
            for lk in lookups(a):
                self.access(Access(lk.tensor, lk.indices), facts, stmt)

    def access(self, acc: Access, facts: "Facts", stmt: Stmt) -> None:
        from .bounds import Use, out_of_bounds_error
        from .index import Compare

        shape = self.shapes[acc.tensor]
        for dim, (ix, ext) in enumerate(zip(acc.indices, shape)):
            if facts.implies(Compare(">=", ix, Affine.constant(0))) and facts.implies(Compare("<=", ix, ext - 1)):
                continue
            why = out_of_bounds_error(_NoSource(), _NoSource(), Use(acc, (), ()), dim, ix, ext, facts, self.sizes)
            message = why.message
            if self.kernel is not None:
                message = f"in kernel '{self.kernel.name}': {message}"
            loc = None
            if self.source is not None:
                loc = self.source.nodes.get(stmt) or self.source.nodes.get(self.kernel)
            raise TccError(message, loc, self.source)
