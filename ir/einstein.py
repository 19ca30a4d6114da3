"""Whole-tensor expressions with Einstein products (Lippmann, sec. 2), lowered to L1.

    y = A *(ij,j->i) x            # matrix-vector product
    s = x *(i,i->) y              # inner product
    T = X *(ij,->ji) 1            # transpose
    g = exp(-(x *(i,i->) x)) * 2  # element-wise functions, scalar broadcasting
    D = delta(1) *(ij,ij->ij) X   # delta(n): the identity of order 2n (here: X's diagonal part)
    d = det(A + 1)                # matrix functions of any order-2 expression

A product ``L *(s1,s2->s3) R`` is ``C[s3] = sum over (s1 s2) minus s3 of
L[s1] * R[s2]`` (eq. 2.1); repeated letters in one operand take a diagonal.
This module parses such an expression, infers the axes of every node the way
Lippmann's sec. 3.2.3-3.2.4 does (orders bottom-up, then axis unification
with a union-find instead of his top-down renaming pass), and generates an
ordinary element-wise L1 definition: nothing downstream knows that the source
was an Einstein product.  A matrix function whose argument is not simply a
tensor name gets its argument outlined into a definition of its own, because
a :class:`MatrixFn` is always a whole definition.

Two compatibility rules of Lippmann's input language are kept, because his
appendix relies on them: a constant takes whatever order its index string in a
product gives it (``1 *(ij,ij->) X`` sums X), and an *empty* index string on a
non-scalar operand stands for the other operand's string when that one has the
right length (``a *(i,->i) a`` is the element-wise square).  ``^`` is a synonym
of ``**``, and ``arcsin``, ``arccos``, ``arctan`` of ``asin``, ``acos``, ``atan``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from .diagnostics import TccError
from .expr import (
    MATMUL,
    MATRIX_FUNCTIONS,
    ONE,
    UNARY_FUNCTIONS,
    ZERO,
    Access,
    Binary,
    Const,
    Expr,
    FreshNames,
    MatrixFn,
    Step,
    Sum,
    Unary,
    Where,
    fresh_name,
    trampoline,
)
from .index import Affine, And, Compare
from .lexer import Token
from .program import Definition

__all__ = ["TensorExprParser", "starts_tensor_expression", "FUNCTION_ALIASES"]

FUNCTION_ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan"}
_INDEX_NAMES = ("i", "j", "k", "l", "m", "p", "q", "r", "s", "t", "u", "v")


# ---------------------------------------------------------------------------
# the tensor-expression tree (parse result, before axes are known)
# ---------------------------------------------------------------------------
@dataclass(eq=False)
class TNode:
    tok: Token
    axes: list["Axis"] | None = field(default=None, init=False)  # None: a broadcast constant


@dataclass(eq=False)
class TRef(TNode):
    name: str = ""


@dataclass(eq=False)
class TConst(TNode):
    value: int | float = 0


@dataclass(eq=False)
class TDelta(TNode):
    n: int = 0


@dataclass(eq=False)
class TUnary(TNode):
    op: str = ""
    arg: TNode | None = None


@dataclass(eq=False)
class TBinary(TNode):
    op: str = ""
    lhs: TNode | None = None
    rhs: TNode | None = None


@dataclass(eq=False)
class TProduct(TNode):
    lhs: TNode | None = None
    rhs: TNode | None = None
    specs: tuple[str, str, str] = ("", "", "")


@dataclass(eq=False)
class TMatrix(TNode):
    fn: str = ""
    arg: TNode | None = None
    name: str = ""  # the definition that holds the result, once outlined


# ---------------------------------------------------------------------------
# axes: a union-find whose classes know their length
# ---------------------------------------------------------------------------
class Axis:
    __slots__ = ("parent", "extent", "what")

    def __init__(self, extent: Affine | None, what: str) -> None:
        self.parent: Axis | None = None
        self.extent = extent
        self.what = what  # "axis 2 of A", for messages

    def find(self) -> "Axis":
        a = self
        while a.parent is not None:
            a = a.parent
        return a


def _size_name(e: Affine) -> str | None:
    if e.const == 0 and len(e.terms) == 1 and e.terms[0][1] == 1 and isinstance(e.terms[0][0], str):
        return e.terms[0][0]
    return None


class Axes:
    """Unification of axes.  ``merge_sizes``: two different size names may be
    declared equal (Lippmann's form, where every length is symbolic and only
    the expression says which are the same); otherwise different lengths are
    an error."""

    def __init__(
        self,
        merge_sizes: bool,
        error: Callable[[str, Token], TccError],
        size_order: Callable[[str], object] = str,
    ) -> None:
        self.merge_sizes = merge_sizes
        self.error = error
        self.size_order = size_order  # which of two merged size names is kept: the first in this order
        self.size_subst: dict[str, Affine] = {}

    def resolve(self, e: Affine) -> Affine:
        while self.size_subst:
            new = e.substitute(self.size_subst)
            if new == e:
                return e
            e = new
        return e

    def unify(self, a: Axis, b: Axis, tok: Token, why: str) -> None:
        ra, rb = a.find(), b.find()
        if ra is rb:
            return
        ea = None if ra.extent is None else self.resolve(ra.extent)
        eb = None if rb.extent is None else self.resolve(rb.extent)
        if ea is not None and eb is not None and ea != eb:
            na, nb = _size_name(ea), _size_name(eb)
            if self.merge_sizes and na is not None and nb is not None:
                # the later size name becomes the earlier one
                keep, drop = sorted((na, nb), key=self.size_order)
                self.size_subst[drop] = Affine.var(keep)
                ea = Affine.var(keep)
            else:
                raise self.error(f"{why}: {ra.what} has length {ea} but {rb.what} has length {eb}", tok)
        rb.parent = ra
        ra.extent = ea if ea is not None else eb

    def extent(self, a: Axis) -> Affine | None:
        e = a.find().extent
        return None if e is None else self.resolve(e)


# ---------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------
def _is_spec_start(p, k: int = 0) -> bool:  # noqa: ANN001 - Parser
    """``*`` ``(`` [letters] ``,``: an Einstein product, not ``x * (y + 1)``."""
    if not (p.peek(k).is_op("*") and p.peek(k + 1).is_op("(")):
        return False
    t = p.peek(k + 2)
    if t.is_op(","):
        return True
    return t.kind == "NAME" and p.peek(k + 3).is_op(",")


def starts_tensor_expression(p, orders: dict[str, int]) -> bool:  # noqa: ANN001 - Parser
    """Whether the statement from the parser's position on is a whole-tensor expression.

    It is when it has an Einstein product, ``delta(n)``, a matrix function,
    or names a non-scalar tensor without indices.
    """
    if p.peek().is_word(MATMUL):  # matmul(A, B): an L1 definition of its own (the L1 parser checks it)
        return False
    k = 0
    while True:
        t = p.peek(k)
        if t.kind in ("NEWLINE", "EOF"):
            return False
        if _is_spec_start(p, k):
            return True
        if t.kind == "NAME":
            nxt = p.peek(k + 1)
            if t.value == "delta" and nxt.is_op("("):
                return True
            if t.value in MATRIX_FUNCTIONS and nxt.is_op("("):
                return True
            if orders.get(t.value, 0) > 0 and not nxt.is_op("["):
                return True
        k += 1


class TensorExprParser(FreshNames):
    """Parses one whole-tensor expression from a :class:`tcc.ir.parser.Parser` and lowers it.

    ``orders``: every tensor that may be named, with its order; ``extents``:
    their extents where known (inputs; definitions made here).
    """

    def __init__(
        self,
        parser,  # noqa: ANN001 - tcc.ir.parser.Parser (import cycle)
        orders: dict[str, int],
        extents: dict[str, tuple[Affine, ...] | None],
        taken: set[str],
        merge_sizes: bool = False,
        size_order: Callable[[str], object] = str,
    ) -> None:
        self.p = parser
        self.orders = orders
        self.extents = extents
        self.taken = taken
        self.ax = Axes(merge_sizes, parser.error, size_order)
        self.tensor_axes: dict[str, list[Axis]] = {}
        self.outlined: list[Definition] = []

    # -- grammar ---------------------------------------------------------------
    def expr(self) -> TNode:
        lhs = self.term()
        while self.p.peek().is_op("+", "-"):
            tok = self.p.advance()
            lhs = TBinary(tok, op=tok.value, lhs=lhs, rhs=self.term())
        return lhs

    def term(self) -> TNode:
        lhs = self.unary()
        while True:
            if _is_spec_start(self.p):
                tok = self.p.advance()
                self.p.advance()
                specs = self.specs(tok)
                lhs = TProduct(tok, lhs=lhs, rhs=self.unary(), specs=specs)
            elif self.p.peek().is_op("*", "/"):
                tok = self.p.advance()
                lhs = TBinary(tok, op=tok.value, lhs=lhs, rhs=self.unary())
            else:
                return lhs

    def specs(self, tok: Token) -> tuple[str, str, str]:
        """``s1 , s2 -> s3 )`` after ``*(``; each string may be empty."""
        out: list[str] = []
        for k, closing in enumerate((",", "->", ")")):
            letters = ""
            t = self.p.peek()
            if t.kind == "NAME":
                self.p.advance()
                letters = t.value
                if not (letters.isascii() and letters.isalpha() and letters.islower()):
                    raise self.p.error(f"index string '{letters}' must be lowercase letters a-z", t)
            out.append(letters)
            if closing == "->":
                self.p.expect("-")
                if not self.p.peek().is_op(">"):
                    raise self.p.unexpected("'->'", self.p.peek())
                self.p.advance()
            else:
                self.p.expect(closing)
        return out[0], out[1], out[2]

    def unary(self) -> TNode:
        self.p.enter()
        try:
            tok = self.p.peek()
            if tok.is_op("-"):
                self.p.advance()
                return TUnary(tok, op="neg", arg=self.unary())
            base = self.atom()
            if self.p.peek().is_op("**", "^"):
                ptok = self.p.advance()
                return TBinary(ptok, op="**", lhs=base, rhs=self.unary())
            return base
        finally:
            self.p.depth -= 1

    def atom(self) -> TNode:
        p = self.p
        tok = p.peek()
        if tok.kind in ("INT", "FLOAT"):
            p.advance()
            return TConst(tok, value=p.number(tok))
        if tok.is_op("("):
            p.advance()
            e = self.expr()
            p.expect(")")
            return e
        if tok.kind != "NAME":
            raise p.unexpected("a tensor expression", tok)
        word = tok.value
        if p.peek(1).is_op("("):
            fn = FUNCTION_ALIASES.get(word, word)
            if word == "delta":
                p.advance()
                p.advance()
                ntok = p.peek()
                if ntok.kind != "INT":
                    raise p.unexpected("the order of delta (an integer: delta(1) is the identity matrix)", ntok)
                p.advance()
                p.expect(")")
                return TDelta(tok, n=int(ntok.value))
            if fn in UNARY_FUNCTIONS or fn in MATRIX_FUNCTIONS:
                p.advance()
                p.advance()
                arg = self.expr()
                p.expect(")")
                if fn in MATRIX_FUNCTIONS:
                    return TMatrix(tok, fn=fn, arg=arg)
                return TUnary(tok, op=fn, arg=arg)
            if word == MATMUL:
                raise p.error(
                    "matmul is a definition of its own ('C[i, j] = matmul(A, B)[i, j]'); "
                    "in a whole-tensor expression write the product A *(ij,jk->ik) B",
                    tok,
                )
            known = ", ".join(UNARY_FUNCTIONS + tuple(MATRIX_FUNCTIONS) + ("delta",))
            raise p.error(f"unknown function '{word}' (functions: {known})", tok)
        if p.peek(1).is_op("["):
            raise p.error(
                f"'{word}[...]' in a whole-tensor expression: name the whole tensor ('{word}') "
                "and use an Einstein product to pick its axes, or write an element-wise definition",
                p.peek(1),
            )
        p.name("a tensor name")  # reports reserved words
        if word not in self.orders:
            raise p.error(f"unknown tensor '{word}'", tok)
        return TRef(tok, name=word)

    # -- axes ------------------------------------------------------------------
    def axes_of_tensor(self, name: str, tok: Token) -> list[Axis]:
        axes = self.tensor_axes.get(name)
        if axes is None:
            ext = self.extents.get(name)
            order = self.orders[name]
            if ext is not None and len(ext) != order:  # the verifier's message; it would only run later
                raise self.p.error(
                    f"'{name}' is declared with {len(ext)} dimension{'s' if len(ext) != 1 else ''}"
                    f" but defined with {order} ind{'ices' if order != 1 else 'ex'}", tok)
            axes = [
                Axis(None if ext is None else ext[k], f"axis {k + 1} of '{name}'") for k in range(order)
            ]
            self.tensor_axes[name] = axes
        return axes

    def infer(self, n: TNode) -> Step:
        """Give ``n`` and its subtree their axes (bottom-up orders, unified lengths)."""
        ax = self.ax
        if isinstance(n, TRef):
            n.axes = list(self.axes_of_tensor(n.name, n.tok))
        elif isinstance(n, TConst):
            n.axes = None
        elif isinstance(n, TDelta):
            lo = [Axis(None, f"axis {k + 1} of delta({n.n})") for k in range(n.n)]
            hi = [Axis(None, f"axis {n.n + k + 1} of delta({n.n})") for k in range(n.n)]
            for a, b in zip(lo, hi):
                ax.unify(a, b, n.tok, "delta is square")
            n.axes = lo + hi
        elif isinstance(n, TUnary):
            assert n.arg is not None
            yield self.infer(n.arg)
            n.axes = n.arg.axes
        elif isinstance(n, TBinary):
            assert n.lhs is not None and n.rhs is not None
            yield self.infer(n.lhs)
            yield self.infer(n.rhs)
            la, ra = n.lhs.axes, n.rhs.axes
            op = n.op
            if la and ra:
                if len(la) != len(ra):
                    raise self.p.error(
                        f"the operands of '{op}' have orders {len(la)} and {len(ra)}: element-wise operations "
                        "need equal orders or a scalar (an Einstein product combines other shapes)",
                        n.tok,
                    )
                for a, b in zip(la, ra):
                    ax.unify(a, b, n.tok, f"'{op}' is element-wise")
                n.axes = la
            elif la or ra:
                n.axes = la or ra  # a scalar broadcasts
            else:
                n.axes = None if la is None and ra is None else []
        elif isinstance(n, TProduct):
            yield self.infer_product(n)
        elif isinstance(n, TMatrix):
            assert n.arg is not None
            yield self.infer(n.arg)
            a = n.arg.axes
            if a is None or len(a) != 2:
                order = 0 if a is None else len(a)
                raise self.p.error(f"{n.fn} needs a matrix (order 2), not a tensor of order {order}", n.tok)
            ax.unify(a[0], a[1], n.tok, f"{n.fn} needs a square matrix")
            n.axes = list(a) if MATRIX_FUNCTIONS[n.fn] else []
        else:  # pragma: no cover - closed set
            raise TypeError(n)

    def infer_product(self, n: TProduct) -> Step:
        assert n.lhs is not None and n.rhs is not None
        yield self.infer(n.lhs)
        yield self.infer(n.rhs)
        s1, s2, s3 = n.specs
        l_order = None if n.lhs.axes is None else len(n.lhs.axes)
        r_order = None if n.rhs.axes is None else len(n.rhs.axes)
        # Lippmann's appendix: an empty string on a non-scalar operand is the other one's
        if not s1 and l_order and len(s2) == l_order:
            s1 = s2
        if not s2 and r_order and len(s1) == r_order:
            s2 = s1
        n.specs = (s1, s2, s3)
        for side, s, order in (("left", s1, l_order), ("right", s2, r_order)):
            if order is not None and len(s) != order:
                raise self.p.error(
                    f"the {side} operand of the product has order {order} but the index string '{s}' "
                    f"has {len(s)} letter{'s' if len(s) != 1 else ''}",
                    n.tok,
                )
        if len(set(s3)) != len(s3):
            raise self.p.error(f"the result index string '{s3}' repeats a letter", n.tok)
        letter: dict[str, Axis] = {}
        for s, node in ((s1, n.lhs), (s2, n.rhs)):
            axes = node.axes if node.axes is not None else None
            new_axes: list[Axis] = []
            for k, c in enumerate(s):
                a = axes[k] if axes is not None else Axis(None, f"index '{c}' of a constant")
                if c in letter:
                    self.ax.unify(letter[c], a, n.tok, f"index '{c}' of the product")
                else:
                    letter[c] = a
                new_axes.append(a)
            if node.axes is None and s:
                node.axes = new_axes  # a constant takes its order from its index string
        for c in s3:
            if c not in letter:
                letter[c] = Axis(None, f"index '{c}' of the product")
        n.axes = [letter[c] for c in s3]
        n.letter_axes = letter  # type: ignore[attr-defined]

    # -- lowering to L1 ---------------------------------------------------------
    def index_names(self, count: int) -> list[str]:
        out: list[str] = []
        for base in _INDEX_NAMES:
            if len(out) == count:
                break
            if base not in self.taken:
                out.append(base)
        while len(out) < count:
            out.append(fresh_name("i", self.taken | set(out)))
        return out

    def length(self, a: Axis, tok: Token, what: str) -> Affine:
        e = self.ax.extent(a)
        if e is None:
            raise self.p.error(f"cannot tell the length of {what}: no tensor of known shape shares it", tok)
        return e

    def outline_argument(self, n: TMatrix, result: str) -> str:
        """The name of a matrix function's argument, given a definition of its own unless a name."""
        assert n.arg is not None and n.arg.axes is not None
        if isinstance(n.arg, TRef):
            return n.arg.name
        if isinstance(n.arg, TMatrix) and n.arg.name:
            return n.arg.name
        arg = self.fresh(f"{result}_arg")
        idx = self.index_names(2)
        ext = tuple(self.length(a, n.tok, f"the argument of {n.fn}") for a in n.arg.axes)
        body = trampoline(self.lower(n.arg, tuple(Affine.var(i) for i in idx), set(idx)))
        self.outlined.append(Definition(arg, tuple(idx), body, ext, n.tok.loc))
        self.orders[arg] = 2
        self.extents[arg] = ext
        return arg

    def matrix_definition(self, n: TMatrix, name: str) -> Definition:
        order = MATRIX_FUNCTIONS[n.fn]
        node = MatrixFn(n.fn, self.outline_argument(n, name))
        self.p.record(node, n.tok)
        ext = tuple(self.length(a, n.tok, n.fn) for a in n.axes or [])
        return Definition(name, tuple(self.index_names(order)), node, ext, n.tok.loc)

    def outline(self, n: TMatrix, result: str) -> None:
        """Give a matrix function inside an expression a definition of its own."""
        n.name = self.fresh(f"{result}_{n.fn}")
        d = self.matrix_definition(n, n.name)
        self.outlined.append(d)
        self.orders[n.name] = len(d.indices)
        self.extents[n.name] = d.extents

    def lower(self, n: TNode, idx: tuple[Affine, ...], scope: set[str]) -> Step:
        """The element ``n[idx]`` as an L1 expression; ``scope``: index names in use around it."""
        if isinstance(n, TRef):
            node: Expr = Access(n.name, idx if n.axes else ())
            self.p.record(node, n.tok)
            return node
        if isinstance(n, TConst):
            return Const(n.value)
        if isinstance(n, TDelta):
            if n.n == 0:
                return ONE
            eqs = [Compare("==", idx[k], idx[n.n + k]) for k in range(n.n)]
            return Where(eqs[0] if len(eqs) == 1 else And(tuple(eqs)), ONE, ZERO)
        if isinstance(n, TUnary):
            assert n.arg is not None
            return Unary(n.op, (yield self.lower(n.arg, idx, scope)))
        if isinstance(n, TBinary):
            assert n.lhs is not None and n.rhs is not None
            lhs = yield self.lower(n.lhs, idx if n.lhs.axes else (), scope)
            rhs = yield self.lower(n.rhs, idx if n.rhs.axes else (), scope)
            return Binary(n.op, lhs, rhs)
        if isinstance(n, TMatrix):
            assert n.name
            node = Access(n.name, idx if n.axes else ())
            self.p.record(node, n.tok)
            return node
        assert isinstance(n, TProduct) and n.lhs is not None and n.rhs is not None
        s1, s2, s3 = n.specs
        letters: dict[str, Affine] = dict(zip(s3, idx))
        summed = [c for c in dict.fromkeys(s1 + s2) if c not in letters]
        names: list[str] = []
        for c in summed:
            v = fresh_name(c, self.taken | scope | set(names))
            names.append(v)
            letters[c] = Affine.var(v)
        inner = scope | set(names)
        lhs = yield self.lower(n.lhs, tuple(letters[c] for c in s1), inner)
        rhs = yield self.lower(n.rhs, tuple(letters[c] for c in s2), inner)
        body: Expr
        if isinstance(lhs, Const) and lhs.value == 1:
            body = rhs
        elif isinstance(rhs, Const) and rhs.value == 1:
            body = lhs
        else:
            body = Binary("*", lhs, rhs)
        axes = n.letter_axes  # type: ignore[attr-defined]
        for c, v in reversed(list(zip(summed, names))):
            hi = self.length(axes[c], n.tok, f"index '{c}' of the product") - 1
            body = Sum(v, (Affine.constant(0),), (hi,), body)
        return body

    def matrices(self, n: TNode, result: str) -> Step:
        """Outline every matrix function, innermost first."""
        for c in (getattr(n, "arg", None), getattr(n, "lhs", None), getattr(n, "rhs", None)):
            if c is not None:
                yield self.matrices(c, result)
        if isinstance(n, TMatrix):
            self.outline(n, result)

    # -- entry -----------------------------------------------------------------
    def definition(self, name: str, tok: Token) -> tuple[list[Definition], Definition]:
        """Parse the right-hand side of ``name = ...``: (outlined definitions, the definition)."""
        root = self.expr()
        trampoline(self.infer(root))
        if isinstance(root, TMatrix):
            # `d = det(A + 1)`: the definition is the matrix function itself
            assert root.arg is not None
            trampoline(self.matrices(root.arg, name))
            return self.outlined, self.matrix_definition(root, name)
        trampoline(self.matrices(root, name))
        axes = root.axes or []
        ext = tuple(self.length(a, tok, f"axis {k + 1} of '{name}'") for k, a in enumerate(axes))
        idx = self.index_names(len(axes))
        body = trampoline(self.lower(root, tuple(Affine.var(i) for i in idx), set(idx)))
        return self.outlined, Definition(name, tuple(idx), body, ext, tok.loc)

    def sizes(self, extents: Sequence[Affine]) -> tuple[Affine, ...]:
        return tuple(self.ax.resolve(e) for e in extents)
