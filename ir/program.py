"""L1 programs: declared inputs and element-wise definitions.

A program is immutable; passes return new programs.  Source locations live in
a side table (:class:`SourceMap`) because hash-consed nodes can occur at several
places in the text: the first occurrence is the one reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from .diagnostics import Loc, SourceMap
from .expr import Expr, all_names
from .index import Affine, And, Compare, Cond
from .printer import format_program


#: Index arrays a call derives from a 1-D index input ``src[n] < v`` (largest entry ``h``) on entry,
#: in O(n + h): the inverse index that makes derivatives through ``x[src[i]]`` gathers.
#: ``inverse_ptr(src)[w]`` (``w`` in ``0..h + 1``) counts the positions whose entry is below ``w``;
#: ``inverse_perm(src)`` lists the positions sorted by entry (stable), so the positions reading
#: element ``w`` are ``inverse_perm(src)[inverse_ptr(src)[w]..inverse_ptr(src)[w + 1] - 1]``;
#: ``rows(src)[k]`` (``k`` in ``0..h - 1``) of a nondecreasing row pointer ``src[m + 1] <= h`` is the
#: row ``i`` with ``src[i] <= k < src[i + 1]``, or ``m`` where no row holds ``k``.
DERIVED_INDEX = ("inverse_ptr", "inverse_perm", "rows")


def derived_shape(fn: str, src: "TensorDecl") -> tuple[tuple[Affine, ...], tuple[str, Affine]]:
    """The extents and bound of ``fn(src)`` (see :data:`DERIVED_INDEX`), in ``src``'s sizes."""
    (n,) = src.extents
    h = src.index_hi
    if fn == "inverse_ptr":
        return (h + 2,), ("<=", n)
    if fn == "inverse_perm":
        return (n,), ("<", n)
    if src.derived is not None and src.derived[0] == "inverse_ptr":
        # the buckets of an inverse_ptr (h + 2 entries, first 0, last the length) cover every position:
        # no entry is "in no row", so the rows are 0..h, not 0..h + 1 (a second derivative reads through them)
        return (h,), ("<=", n - 2)
    return (h,), ("<=", n - 1)


@dataclass(frozen=True)
class TensorDecl:
    """An input.  ``bound`` is ``("<", v)`` or ``("<=", nnz)`` for an **index input**
    (``index tok[n] < v``): an integer array whose entries lie in
    ``0..v - 1`` (``0..nnz``), which other reads may be indexed through.  The
    runtime checks the bound on entry; the prover takes it as given."""

    name: str
    extents: tuple[Affine, ...]
    loc: Loc | None = field(default=None, compare=False)
    bound: tuple[str, Affine] | None = None
    #: ``("inverse_ptr", "tok")`` etc.: an index array the call computes from another one
    #: (:data:`DERIVED_INDEX`) instead of taking it from the caller; see ``inverse-index``.
    derived: tuple[str, str] | None = None

    @property
    def is_index(self) -> bool:
        return self.bound is not None

    @property
    def is_derived(self) -> bool:
        return self.derived is not None

    @property
    def index_hi(self) -> Affine:
        """The largest entry allowed (inclusive): ``v - 1`` for ``< v``, ``nnz`` for ``<= nnz``."""
        assert self.bound is not None
        op, b = self.bound
        return b - 1 if op == "<" else b


@dataclass(frozen=True)
class Assumption:
    """``assume cond``: an affine constraint on sizes that the prover may use and every call must meet.

    ``cond`` is comparisons of size expressions joined by ``and``.  It is a
    promise the caller makes (``assume n >= 1`` lets ``x[0]`` of an
    ``x[n]`` be proved in bounds); the runtime and the interpreter check it
    when sizes are bound (:func:`tcc.sizes.bind_sizes`), so compiled code
    never runs on sizes that break it.
    """

    cond: Cond
    loc: Loc | None = field(default=None, compare=False)


def assumption_error(cond: Cond, sizes: Iterable[str]) -> str | None:
    """What is wrong with ``assume cond`` in a program with these size names, or None.

    Only comparisons joined by ``and`` (a conjunction is a set of facts the
    prover can add; ``or`` and ``not`` are not), and only size names: an
    assumption is about the shapes a caller passes.
    """
    parts = cond.parts if isinstance(cond, And) else (cond,)
    if not all(isinstance(p, Compare) for p in parts):
        return "'assume' takes comparisons of sizes joined by 'and' (not 'or' or 'not')"
    known = set(sizes)
    for p in parts:
        for name in p.names():
            if name not in known:
                return f"'assume' constrains sizes, and '{name}' is not a size of this program (sizes: {', '.join(sorted(known)) or 'none'})"
    return None


@dataclass(frozen=True)
class Definition:
    """``name[indices] = body``; ``extents`` is None until declared or inferred."""

    name: str
    indices: tuple[str, ...]
    body: Expr
    extents: tuple[Affine, ...] | None = None
    loc: Loc | None = field(default=None, compare=False)

    def with_body(self, body: Expr) -> "Definition":
        return replace(self, body=body)


@dataclass(frozen=True)
class Program:
    inputs: tuple[TensorDecl, ...]
    definitions: tuple[Definition, ...]
    outputs: tuple[str, ...] = ()
    source: SourceMap | None = field(default=None, compare=False)
    assumptions: tuple[Assumption, ...] = ()

    # -- lookups ---------------------------------------------------------
    def input(self, name: str) -> TensorDecl | None:
        for d in self.inputs:
            if d.name == name:
                return d
        return None

    def definition(self, name: str) -> Definition | None:
        for d in self.definitions:
            if d.name == name:
                return d
        return None

    def extents_of(self, name: str) -> tuple[Affine, ...] | None:
        decl = self.input(name)
        if decl is not None:
            return decl.extents
        d = self.definition(name)
        return None if d is None else d.extents

    def index_inputs(self) -> tuple[TensorDecl, ...]:
        """The ``index`` declarations the caller passes (integer inputs), in declaration order."""
        return tuple(d for d in self.inputs if d.is_index and not d.is_derived)

    def derived_inputs(self) -> tuple[TensorDecl, ...]:
        """The index arrays a call computes itself (``= inverse_ptr(tok)``), in declaration order."""
        return tuple(d for d in self.inputs if d.is_derived)

    def caller_inputs(self) -> tuple[TensorDecl, ...]:
        """The inputs a caller passes: every input but the derived index arrays."""
        return tuple(d for d in self.inputs if not d.is_derived)

    def tensor_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.inputs) + tuple(d.name for d in self.definitions)

    def sizes(self) -> tuple[str, ...]:
        """Size names, in order of first appearance in the input declarations."""
        out: dict[str, None] = {}
        for decl in self.inputs:
            for e in decl.extents:
                out.update(dict.fromkeys(e.names()))
        return tuple(out)

    def names_in_use(self) -> set[str]:
        """Every tensor, size and index name, bound or free: what a fresh name must avoid."""
        names = set(self.tensor_names()) | set(self.sizes())
        for d in self.definitions:
            names.update(d.indices)
            names.update(all_names(d.body))
        return names

    def results(self) -> tuple[str, ...]:
        """The definitions a caller wants: the declared outputs, or every definition if none is declared."""
        return self.outputs if self.outputs else tuple(d.name for d in self.definitions)

    def loc_of(self, node: object) -> Loc | None:
        return None if self.source is None else self.source.loc_of(node)

    # -- functional updates ---------------------------------------------
    def with_definitions(self, defs: Iterable[Definition]) -> "Program":
        return replace(self, definitions=tuple(defs))

    def replace(self, **kw) -> "Program":
        return replace(self, **kw)

    def expand_definitions(self, rewrite: Callable[[Definition], list[Definition]]) -> "Program":
        """Each definition replaced by what ``rewrite`` makes of it (itself, or new local
        definitions followed by it), or this program itself when nothing changed.

        The results are fixed before the locals join the definitions: with no
        declared outputs every definition is a result, and a new local must
        not become one.
        """
        defs: list[Definition] = []
        changed = False
        for d in self.definitions:
            new = rewrite(d)
            changed |= new != [d]
            defs.extend(new)
        if not changed:
            return self
        return replace(self, definitions=tuple(defs), outputs=self.results())

    def __str__(self) -> str:
        return format_program(self)
