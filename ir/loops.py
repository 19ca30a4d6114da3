"""L2, the loop-nest IR: kernels of ``for`` loops, scalars, loads and stores.

A :class:`LoopProgram` is what ``lower-loops`` makes of an L1 program and what
``lower-llvm`` turns into an LLVM module.  It is deliberately small (loopy's
and TACO's imperative IRs were the models):

* **buffers** -- every array the program touches, with a role: ``input``,
  ``output`` (a result definition), ``local`` (a non-result definition: still
  computed and returned by the runtime, as ``tcc run`` requires) and ``temp``
  (created by an L2 pass such as ``hoist``; never returned).  Shapes are
  affine in the size names, so one compiled kernel serves every size.
* **kernels** -- run in order; each is a statement list, usually one loop nest
  per L1 definition.  A ``For`` marked ``parallel`` at the top of a kernel is
  split over threads by the runtime (CPU) or over GPU threads.
* **external kernels** -- a kernel whose body is the single statement
  :class:`Extern` (``extern inv(A) -> B``, ``extern matmul(A, B) -> C``)
  computes a matrix function or product of whole buffers outside compiled
  code (LAPACK or BLAS through NumPy, on the host).  It reads its arguments
  and writes all of its result; L2 passes leave such kernels alone and never
  move code across them.

Scalar expressions are L1 expression nodes (:mod:`tcc.ir.expr`) without
``Sum``/``CSum``: ``Access(buf, idx)`` is a load, ``Access(name, ())`` of a
name bound by :class:`Let` or :class:`Local` reads that scalar, ``Where``
selects *lazily* (its untaken branch may hold a load that would be out of
bounds, so lowering must branch, not evaluate both sides).  Reusing L1 nodes
keeps one printer, one hash-consing table and one set of unary functions.

All nodes are frozen dataclasses; transformations build new trees.  Loop
bounds are inclusive, like the language's ``sum[k: lo..hi]``: the loop runs
``max(lo...) <= v <= min(hi...)`` and not at all if that range is empty.
Floor and ceiling division appear as ``FloorDiv`` atoms inside the affine
forms (``ceil(a/d)`` is written ``(a + d - 1) // d``).

The walker primitives (:func:`children`, :func:`walk_stmts`,
:func:`stmt_exprs`) stay with the nodes: the verifier and the LLVM backend
use them as they are.  What statements read and write, and the rewriters the
L2 passes share, are in :mod:`tcc.ir.loop_analysis`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator, Literal, Union

from .expr import Expr
from .index import Affine, Cond, format_affine
from .expr import ExprPrinter, format_matrix_call
from .index import format_cond

Role = Literal["input", "output", "local", "temp"]
ROLES: tuple[str, ...] = ("input", "output", "local", "temp")


@dataclass(frozen=True)
class Buffer:
    """A dense row-major array of the program's element type, or, with a ``bound``, of int64:
    an index input (``index tok[n] < v``: ``bound`` is ``("<", v)``), read only inside
    index expressions (:class:`~tcc.ir.index.Lookup` atoms), never written."""

    name: str
    shape: tuple[Affine, ...]
    role: Role
    bound: "tuple[str, Affine] | None" = None
    derived: "tuple[str, str] | None" = None  # `= inverse_ptr(tok)`: computed by the call (tcc.ir.program.DERIVED_INDEX)

    @property
    def rank(self) -> int:
        return len(self.shape)


# ---------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class For:
    """``for var in max(lo...)..min(hi...) { body }`` (inclusive bounds)."""

    var: str
    lo: tuple[Affine, ...]
    hi: tuple[Affine, ...]
    body: tuple["Stmt", ...]
    parallel: bool = False

    def __post_init__(self) -> None:
        if not self.lo or not self.hi:
            raise ValueError("a loop needs at least one lower and one upper bound")


@dataclass(frozen=True)
class Let:
    """An immutable scalar: ``let name = value``."""

    name: str
    value: Expr


@dataclass(frozen=True)
class Local:
    """A mutable scalar (an accumulator): ``local name = init``."""

    name: str
    init: Expr


@dataclass(frozen=True)
class Store:
    """``buffer[indices] = value``."""

    buffer: str
    indices: tuple[Affine, ...]
    value: Expr


@dataclass(frozen=True)
class Accumulate:
    """``target[indices] += value``; a :class:`Local` when ``indices`` is empty
    and ``target`` names one, else a buffer element."""

    target: str
    indices: tuple[Affine, ...]
    value: Expr


@dataclass(frozen=True)
class If:
    """``if cond { then } else { orelse }``; cond compares index expressions."""

    cond: Cond
    then: tuple["Stmt", ...]
    orelse: tuple["Stmt", ...] = ()


@dataclass(frozen=True)
class Extern:
    """``extern fn(args) -> out``: a matrix function (``inv``, ``adj``, ``det``,
    ``logdet``; :data:`tcc.ir.expr.MATRIX_FUNCTIONS`) of the whole square
    buffer ``args[0]``, or the product ``matmul(A, B)`` of two whole buffers,
    written to all of ``out`` by the runtime (LAPACK or BLAS through NumPy),
    not by compiled code.  It is always the whole body of its kernel
    (:attr:`Kernel.extern`).  ``transposed`` flags the arguments ``matmul``
    reads transposed (``extern matmul(A, transpose(B)) -> C`` is ``A @ B.T``;
    empty or all False otherwise), as in :class:`tcc.ir.expr.MatrixFn`.
    ``spec`` is a ``contract``'s index tuples (``extern contract(A[z, a],
    B[z, b]) -> C[a, b]``; :mod:`tcc.ir.contraction`), empty otherwise."""

    fn: str
    out: str
    args: tuple[str, ...]
    transposed: tuple[bool, ...] = ()
    spec: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        # one canonical form: no flags when none is set, so equal externs compare equal
        if not any(self.transposed):
            object.__setattr__(self, "transposed", ())

    def __str__(self) -> str:
        out = f"{self.out}[{', '.join(self.spec[2])}]" if self.spec else self.out
        return f"extern {format_matrix_call(self.fn, self.args, self.transposed, self.spec)} -> {out}"


Stmt = Union[For, Let, Local, Store, Accumulate, If, Extern]


@dataclass(frozen=True)
class Kernel:
    """One unit of work run after the previous kernel has finished."""

    name: str
    body: tuple[Stmt, ...]

    @property
    def extern(self) -> Extern | None:
        """The external computation this kernel is, if its body is one :class:`Extern`."""
        if len(self.body) == 1 and isinstance(self.body[0], Extern):
            return self.body[0]
        return None

    @property
    def parallel_loop(self) -> For | None:
        """The loop the runtime splits over threads, if any.

        Only a kernel whose body is a single parallel ``For`` is split: then
        every iteration is independent and there is no code outside the loop
        that would run once per thread.
        """
        if len(self.body) == 1 and isinstance(self.body[0], For) and self.body[0].parallel:
            return self.body[0]
        return None


@dataclass(frozen=True)
class LoopProgram:
    """Sizes (symbolic, bound at call time), buffers and kernels, in order."""

    sizes: tuple[str, ...]
    buffers: tuple[Buffer, ...]
    kernels: tuple[Kernel, ...]
    source: object | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # Canonical order: by role (ROLES), then as given.  The kernel ABI
        # passes buffers by position, and the printer lists them by role, so
        # this order is what makes print -> parse -> print the identity.
        ordered = tuple(sorted(self.buffers, key=lambda b: (ROLES.index(b.role), b.bound is None, b.derived is not None)))
        object.__setattr__(self, "buffers", ordered)
        object.__setattr__(self, "kernels", tuple(self.kernels))
        object.__setattr__(self, "sizes", tuple(self.sizes))

    def buffer(self, name: str) -> Buffer | None:
        for b in self.buffers:
            if b.name == name:
                return b
        return None

    def with_kernels(self, kernels: tuple[Kernel, ...]) -> "LoopProgram":
        return replace(self, kernels=tuple(kernels))

    def by_role(self, *roles: str) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.role in roles)

    def __str__(self) -> str:
        return format_loop_program(self)


# ---------------------------------------------------------------------------
# Traversal primitives (the analyses built on them: tcc.ir.loop_analysis)
# ---------------------------------------------------------------------------


def children(s: Stmt) -> tuple[Stmt, ...]:
    """The statements nested directly in ``s`` (a loop's body, both branches of a test)."""
    if isinstance(s, For):
        return s.body
    if isinstance(s, If):
        return s.then + s.orelse
    return ()


def walk_stmts(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    """Every statement, pre-order."""
    for s in body:
        yield s
        yield from walk_stmts(children(s))


def stmt_exprs(s: Stmt) -> tuple[Expr, ...]:
    """The scalar expressions a statement itself holds (not its children's)."""
    if isinstance(s, Let):
        return (s.value,)
    if isinstance(s, Local):
        return (s.init,)
    if isinstance(s, (Store, Accumulate)):
        return (s.value,)
    return ()


def lookup_tensors(body: tuple[Stmt, ...]) -> set[str]:
    """Index inputs the statements read inside index expressions (``x[col[k]]``, ``for k in ptr[i]..``).

    Such reads are :class:`~tcc.ir.index.Lookup` atoms, not loads: a kernel
    that has them needs those buffers as arguments all the same.
    """
    from .expr import RANGED, Access, Where, postorder
    from .index import lookups
    from .index_range import cond_affines as conds  # imported here: index_range imports the L1 program module

    affines: list[Affine] = []
    for s in walk_stmts(body):
        if isinstance(s, For):
            affines += s.lo + s.hi
        elif isinstance(s, (Store, Accumulate)):
            affines += s.indices
        elif isinstance(s, If):
            affines += conds(s.cond)
        for e in stmt_exprs(s):
            for n in postorder(e):
                if isinstance(n, Access):
                    affines += n.indices
                elif isinstance(n, Where):
                    affines += conds(n.cond)
                elif isinstance(n, RANGED):
                    affines += n.lo + n.hi
    return {lk.tensor for a in affines for lk in lookups(a)}


# ---------------------------------------------------------------------------
# Printing (the ``--emit loops`` and L2 dump format)
# ---------------------------------------------------------------------------


def _bound(items: tuple[Affine, ...], fn: str) -> str:
    if len(items) == 1:
        return format_affine(items[0])
    return f"{fn}({', '.join(format_affine(a) for a in items)})"


def _ref(name: str, indices: tuple[Affine, ...]) -> str:
    if not indices:
        return name
    return f"{name}[{', '.join(format_affine(i) for i in indices)}]"


def format_stmts(body: tuple[Stmt, ...], indent: int = 1, printer: ExprPrinter | None = None) -> list[str]:
    p = printer or ExprPrinter()
    pad = "  " * indent
    lines: list[str] = []
    for s in body:
        if isinstance(s, For):
            head = "parallel for" if s.parallel else "for"
            lines.append(f"{pad}{head} {s.var} in {_bound(s.lo, 'max')}..{_bound(s.hi, 'min')} {{")
            lines += format_stmts(s.body, indent + 1, p)
            lines.append(pad + "}")
        elif isinstance(s, Let):
            lines.append(f"{pad}let {s.name} = {p.expr(s.value)}")
        elif isinstance(s, Local):
            lines.append(f"{pad}local {s.name} = {p.expr(s.init)}")
        elif isinstance(s, Store):
            lines.append(f"{pad}{_ref(s.buffer, s.indices)} = {p.expr(s.value)}")
        elif isinstance(s, Accumulate):
            lines.append(f"{pad}{_ref(s.target, s.indices)} += {p.expr(s.value)}")
        elif isinstance(s, If):
            lines.append(f"{pad}if {format_cond(s.cond)} {{")
            lines += format_stmts(s.then, indent + 1, p)
            if s.orelse:
                lines.append(pad + "} else {")
                lines += format_stmts(s.orelse, indent + 1, p)
            lines.append(pad + "}")
        elif isinstance(s, Extern):
            lines.append(f"{pad}{s}")
        else:  # pragma: no cover - closed set
            raise TypeError(f"not an L2 statement: {s!r}")
    return lines


def format_loop_program(program: LoopProgram) -> str:
    lines = ["# tcc loops"]
    if program.sizes:
        lines.append("sizes " + ", ".join(program.sizes))
    index = [f"{_ref(b.name, b.shape)} {b.bound[0]} {format_affine(b.bound[1])}" for b in program.buffers
             if b.bound and not b.derived]
    if index:
        lines.append("index " + ", ".join(index))
    lines += [f"index {_ref(b.name, b.shape)} {b.bound[0]} {format_affine(b.bound[1])} = {b.derived[0]}({b.derived[1]})"
              for b in program.buffers if b.derived and b.bound]
    for role in ROLES:
        bufs = [_ref(b.name, b.shape) for b in program.buffers if b.role == role and not b.bound]
        if bufs:
            lines.append(f"{role} " + ", ".join(bufs))
    printer = ExprPrinter()
    for k in program.kernels:
        lines.append("")
        lines.append(f"kernel {k.name} {{")
        lines += format_stmts(k.body, 1, printer)
        lines.append("}")
    return "\n".join(lines) + "\n"
