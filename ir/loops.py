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
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator, Literal, Union

from .expr import Expr
from .index import Affine, Cond, format_affine
from .printer import _Printer, format_cond

Role = Literal["input", "output", "local", "temp"]
ROLES: tuple[str, ...] = ("input", "output", "local", "temp")


@dataclass(frozen=True)
class Buffer:
    """A dense row-major array of the program's element type."""

    name: str
    shape: tuple[Affine, ...]
    role: Role

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
    (:attr:`Kernel.extern`)."""

    fn: str
    out: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"extern {self.fn}({', '.join(self.args)}) -> {self.out}"


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
        ordered = tuple(sorted(self.buffers, key=lambda b: ROLES.index(b.role)))
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
# Traversal helpers
# ---------------------------------------------------------------------------


def children(s: Stmt) -> tuple[Stmt, ...]:
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


def format_stmts(body: tuple[Stmt, ...], indent: int = 1, printer: _Printer | None = None) -> list[str]:
    p = printer or _Printer()
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
    for role in ROLES:
        bufs = [_ref(b.name, b.shape) for b in program.buffers if b.role == role]
        if bufs:
            lines.append(f"{role} " + ", ".join(bufs))
    printer = _Printer()
    for k in program.kernels:
        lines.append("")
        lines.append(f"kernel {k.name} {{")
        lines += format_stmts(k.body, 1, printer)
        lines.append("}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Shared analyses and rewrites (used by several L2 passes and the verifier)
# ---------------------------------------------------------------------------


def strides_with(ix: Affine, var: str) -> bool:
    """``ix`` is ``c*var + rest`` with ``c != 0`` and ``var`` not inside ``//`` or ``%``.

    Such an index is one to one in ``var`` while ``rest`` is fixed: the basis
    of every race-freedom and fusion argument on L2.
    """
    from .index import FloorDiv, Mod

    if ix.coeff(var) == 0:
        return False
    return not any(isinstance(a, (FloorDiv, Mod)) and var in a.num.names() for a in ix.atoms())


def stride_cost(var: str, values: "list[Expr] | tuple[Expr, ...]", buffers: "set[str] | dict[str, int]") -> int:
    """The stride model of ``interchange`` and ``reduce-in-place``: each load in
    ``values`` charges ``var`` how far its last index position is from the
    contiguous (last) dimension; a variable with a small cost walks memory."""
    from .expr import Access as _Access, postorder as _postorder

    cost = 0
    for v in values:
        for n in _postorder(v):
            if isinstance(n, _Access) and n.tensor in buffers and n.indices:
                positions = [p for p, ix in enumerate(n.indices) if var in ix.names()]
                if positions:
                    cost += len(n.indices) - 1 - positions[-1]
    return cost


def fold_bounds(terms: tuple[Affine, ...], lower: bool) -> tuple[Affine, ...]:
    """Merge the constant terms of a ``max`` (lower) or ``min`` (upper) bound and drop repeats."""
    consts = [t.const for t in terms if t.is_constant]
    rest = tuple(dict.fromkeys(t for t in terms if not t.is_constant))
    if not consts:
        return rest
    return (Affine.constant(max(consts) if lower else min(consts)),) + rest


def reduction_band(loop: For) -> list[For] | None:
    """The perfectly nested loops from ``loop`` down whose innermost body only
    binds ``let``s and accumulates into scalars -- a reduction whose loops may
    be reordered or jammed -- or None."""
    band = [loop]
    while len(band[-1].body) == 1 and isinstance(band[-1].body[0], For):
        band.append(band[-1].body[0])
    inner = band[-1].body
    if not inner or not all(isinstance(s, Let) or (isinstance(s, Accumulate) and not s.indices) for s in inner):
        return None
    return band


def substitute_stmts(
    body: tuple[Stmt, ...], indices: dict[str, Affine], scalars: dict[str, str] | None = None
) -> tuple[Stmt, ...]:
    """``body`` with index names replaced by affine forms and scalars (``let``/``local``) renamed.

    A loop whose variable maps to a plain variable is renamed with it (that is
    how ``fuse`` unifies two nests); an index mapped to anything else must not
    be a loop variable of ``body`` (``unroll-jam`` substitutes the unrolled
    variable, which is bound outside).
    """
    from .expr import Access as _Access, Where as _Where, transform as _transform

    scalars = scalars or {}

    def aff(items: tuple[Affine, ...]) -> tuple[Affine, ...]:
        return tuple(a.substitute(indices) for a in items)

    def node(n: Expr) -> Expr:
        if isinstance(n, _Access):
            name = scalars.get(n.tensor, n.tensor) if not n.indices else n.tensor
            return _Access(name, aff(n.indices))
        if isinstance(n, _Where):
            return _Where(n.cond.substitute(indices), n.then, n.other)
        return n

    def expr(e: Expr) -> Expr:
        return _transform(e, node)

    def loop_var(v: str) -> str:
        new = indices.get(v)
        if new is None:
            return v
        if len(new.terms) == 1 and new.const == 0 and new.terms[0][1] == 1 and isinstance(new.terms[0][0], str):
            return new.terms[0][0]
        raise ValueError(f"loop variable '{v}' can only be renamed, not replaced by {new}")

    out: list[Stmt] = []
    for s in body:
        if isinstance(s, For):
            out.append(replace(s, var=loop_var(s.var), lo=aff(s.lo), hi=aff(s.hi), body=substitute_stmts(s.body, indices, scalars)))
        elif isinstance(s, If):
            out.append(If(s.cond.substitute(indices), substitute_stmts(s.then, indices, scalars),
                          substitute_stmts(s.orelse, indices, scalars)))
        elif isinstance(s, Let):
            out.append(Let(scalars.get(s.name, s.name), expr(s.value)))
        elif isinstance(s, Local):
            out.append(Local(scalars.get(s.name, s.name), expr(s.init)))
        elif isinstance(s, Store):
            out.append(Store(s.buffer, aff(s.indices), expr(s.value)))
        elif isinstance(s, Accumulate):
            target = scalars.get(s.target, s.target) if not s.indices else s.target
            out.append(Accumulate(target, aff(s.indices), expr(s.value)))
        elif isinstance(s, Extern):
            out.append(s)  # whole buffers: no indices or scalars to rename
        else:  # pragma: no cover - closed set
            raise TypeError(f"not an L2 statement: {s!r}")
    return tuple(out)
