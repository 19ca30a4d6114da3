"""L1 expression nodes: immutable and hash-consed.

Building the same node twice returns the same object, so structural equality is
identity, common subexpressions are shared for free and a derivative DAG grows
linearly with the function (Lippmann, sec. 4.8); reverse accumulation keys its
adjoints on node identity.  Nodes never fold or simplify on construction: what
a pass builds is what the printer shows (``simplify`` is a dumpable step).

Nodes print themselves: the expression printer is at the end of this module
(conditions and index expressions print in :mod:`tcc.ir.index`), so
``str(node)`` needs nothing above it and :mod:`tcc.ir.printer`, which prints
whole programs, imports this module and not the other way round.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Tuple, Union

from .contraction import CONTRACT, format_contract
from .index import Affine, Cond, format_affine, format_cond, format_conjunct
from .trampoline import Step, trampoline  # re-exported: visitors everywhere import them from here
from .fresh_names import FreshNames, fresh_name  # noqa: F401 - re-exported: the passes import them from here

UNARY_FUNCTIONS = (
    "exp", "log", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "abs", "sign", "relu", "sigmoid",
)
BINARY_OPS = ("+", "-", "*", "/", "**")
#: Functions of a whole square matrix, by the order of their result.  They are
#: not element-wise, so each one is a definition of its own (``MatrixFn``).
MATRIX_FUNCTIONS = {"det": 0, "logdet": 0, "inv": 2, "adj": 2}
#: The matrix product ``matmul(A, B)`` of two named order-2 tensors (``C = A @ B``):
#: a ``MatrixFn`` with two arguments, also a definition of its own.
MATMUL = "matmul"
#: ``gram(X, w)[a, b] = sum[z](X[z, a] * w[z] * X[z, b])``, ``X^T diag(w) X``: ir/gram.py.
GRAM = "gram"

#: ``#index[e]`` reads the integer value of the index expression ``e`` as a float
#: (``sum[j](x[a, j]) / m``, ``x[i] * sin(0.3 * i)``).  As an :class:`Access`, every pass
#: treats it as the read of a tensor indexed by ``e``, which is its dependence; only printers,
#: verifiers, the interpreter and code generators know it.  No program can name it (``#``).
INDEX_VALUE = "#index"
#: Every function a ``MatrixFn`` holds, by its number of arguments (``contract``: ir/contraction.py).
MATRIX_ARITY = {**{fn: 1 for fn in MATRIX_FUNCTIONS}, MATMUL: 2, GRAM: 2, CONTRACT: 2}

_TABLE: "weakref.WeakValueDictionary[tuple, Expr]" = weakref.WeakValueDictionary()


class Expr:
    """Base class.  Subclasses list their fields in ``_fields``."""

    __slots__ = ("__weakref__",)
    _fields: tuple[str, ...] = ()

    def __new__(cls, *args: Any) -> "Expr":
        if len(args) != len(cls._fields):
            raise TypeError(f"{cls.__name__} takes {len(cls._fields)} arguments")
        key = (cls,) + tuple(cls._key(a) for a in args)
        node = _TABLE.get(key)
        if node is None:
            node = object.__new__(cls)
            for name, value in zip(cls._fields, args):
                object.__setattr__(node, name, value)
            _TABLE[key] = node
        return node

    @staticmethod
    def _key(value: Any) -> Any:
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("IR nodes are immutable")

    def __reduce__(self) -> tuple:
        return (type(self), tuple(getattr(self, f) for f in self._fields))

    def children(self) -> tuple["Expr", ...]:
        return ()

    def __str__(self) -> str:
        return format_expr(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self})"


class Const(Expr):
    __slots__ = ("value",)
    _fields = ("value",)
    value: int | float

    def __new__(cls, value: int | float) -> "Const":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"constant must be int or float, not {value!r}")
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            raise ValueError("constants must be finite: the language has no literal for inf or nan")
        return super().__new__(cls, value)

    @staticmethod
    def _key(value: Any) -> Any:
        # 1, 1.0 and -0.0 are different literals and must stay different nodes.
        return (type(value).__name__, repr(value))


class Access(Expr):
    """``tensor[indices]``; a scalar tensor has no indices."""

    __slots__ = ("tensor", "indices")
    _fields = ("tensor", "indices")
    tensor: str
    indices: tuple[Affine, ...]


class Unary(Expr):
    """``neg`` or one of :data:`UNARY_FUNCTIONS`."""

    __slots__ = ("op", "operand")
    _fields = ("op", "operand")
    op: str
    operand: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


class Binary(Expr):
    __slots__ = ("op", "lhs", "rhs")
    _fields = ("op", "lhs", "rhs")
    op: str
    lhs: Expr
    rhs: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.lhs, self.rhs)


#: Comparisons of values in ``where``; ``!=`` is true for NaN, the others false (IEEE, as NumPy).
VALUE_COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
#: Element-wise extremes of two values, written ``max(a, b)`` / ``min(a, b)``; NaN propagates.
EXTREMES = ("max", "min")


class Select(Expr):
    """``where(lhs OP rhs, then, other)`` for a comparison of **values**.

    Unlike :class:`Where`, whose condition compares indices and whose
    untaken branch may read out of bounds, both branches of a select are
    in bounds without the condition (``infer-ranges`` proves them so), so
    it is evaluated eagerly, like arithmetic: all four children are plain
    operands.  ``and``, ``or`` and ``not`` of value comparisons are nested
    selects (the parser desugars them); its derivative is that of the
    chosen branch, the condition held fixed.
    """

    __slots__ = ("op", "lhs", "rhs", "then", "other")
    _fields = ("op", "lhs", "rhs", "then", "other")
    op: str
    lhs: Expr
    rhs: Expr
    then: Expr
    other: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.lhs, self.rhs, self.then, self.other)


class Where(Expr):
    """``where(cond, then, other)``: cond only compares index expressions."""

    __slots__ = ("cond", "then", "other")
    _fields = ("cond", "then", "other")
    cond: Cond
    then: Expr
    other: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.then, self.other)


class Sum(Expr):
    """``sum[var: max(lo..)..min(hi..)](body)``, inclusive bounds.

    ``lo``/``hi`` are tuples whose max/min is the bound; both empty means the
    range is still to be inferred (``sum[k](...)``) by ``infer-ranges``.
    """

    __slots__ = ("var", "lo", "hi", "body")
    _fields = ("var", "lo", "hi", "body")
    var: str
    lo: tuple[Affine, ...]
    hi: tuple[Affine, ...]
    body: Expr

    def __new__(cls, var: str, lo: tuple[Affine, ...], hi: tuple[Affine, ...], body: Expr) -> "Sum":
        if bool(lo) != bool(hi):
            raise ValueError("a sum has both bounds or neither")
        return super().__new__(cls, var, tuple(lo), tuple(hi), body)

    def children(self) -> tuple[Expr, ...]:
        return (self.body,)

    @property
    def has_range(self) -> bool:
        return bool(self.lo)


class Reduce(Expr):
    """``max[var: lo..hi](body)`` / ``min[...]``: scoped and ranged as :class:`Sum` (range passes treat both
    alike), a node of its own so that no rule for sums applies to it; empty: -inf (+inf); NaN propagates."""

    __slots__ = ("op", "var", "lo", "hi", "body")
    _fields = ("op", "var", "lo", "hi", "body")
    op: str
    var: str
    lo: tuple[Affine, ...]
    hi: tuple[Affine, ...]
    body: Expr

    def __new__(cls, op: str, var: str, lo: tuple[Affine, ...], hi: tuple[Affine, ...], body: Expr) -> "Reduce":
        if op not in ("max", "min") or bool(lo) != bool(hi):
            raise ValueError("a max/min reduction has op max or min, and both bounds or neither")
        return super().__new__(cls, op, var, tuple(lo), tuple(hi), body)

    def children(self) -> tuple[Expr, ...]:
        return (self.body,)

    @property
    def has_range(self) -> bool:
        return bool(self.lo)


#: what scopes an index variable over a range: a sum or a max/min reduction
RANGED = (Sum, Reduce)


class CSum(Expr):
    """Constrained sum ``sum[v1, v2 | c1, c2, ...](body)``.

    Sums over all integer points (v1, v2, ...) satisfying the conjunction of
    affine comparisons; the set must be bounded.  This is the
    Σ_{α : Aα = β, Rα ≥ r} of Urban and van der Smagt, sec. 5 between ``sum-liberation`` and
    ``range-bound``.
    """

    __slots__ = ("vars", "constraints", "body")
    _fields = ("vars", "constraints", "body")
    vars: tuple[str, ...]
    constraints: tuple[Cond, ...]
    body: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.body,)


class MatrixFn(Expr):
    """A function of whole matrices: ``inv(A)``, ``adj(A)``, ``det(A)``,
    ``logdet(A)`` of a square ``A``, or the product ``matmul(A, B)``.

    Only ever the entire body of a definition (``B[i, j] = inv(A)[i, j]``,
    ``s = det(A)``, ``C[i, j] = matmul(A, B)[i, j]``): every other node is
    element-wise, and keeping the whole-matrix function at the definition
    level lets every element-wise pass treat its result as an ordinary tensor
    that is read with accesses.  ``lower-loops`` turns such a definition into
    an external kernel (LAPACK or BLAS through NumPy).  ``logdet`` is
    ``log(abs(det(A)))``.  ``args`` are tensor names (:data:`MATRIX_ARITY` of
    them), given separately: ``MatrixFn("inv", "A")``, ``MatrixFn("matmul", "A", "B")``.

    ``transposed`` flags the arguments ``matmul`` reads transposed (all False
    unless given): ``MatrixFn("matmul", "A", "B", transposed=(False, True))``
    is ``A @ B.T``, printed ``matmul(A, transpose(B))``; BLAS reads ``B`` as
    stored with its transpose flag, so ``blas`` copies nothing for ``X W^T``.
    ``spec`` is ``contract``'s index tuples (ir/contraction.py), empty otherwise.
    """

    __slots__ = ("fn", "args", "transposed", "spec")
    _fields = ("fn", "args", "transposed", "spec")
    fn: str
    args: tuple[str, ...]
    transposed: tuple[bool, ...]
    spec: tuple[tuple[str, ...], ...]

    def __new__(cls, fn: str, *args: Any, transposed: "tuple[bool, ...] | None" = None, spec: Any = None) -> "MatrixFn":
        if fn not in MATRIX_ARITY:
            raise ValueError(f"unknown matrix function {fn!r}")
        if args and isinstance(args[0], tuple):  # MatrixFn(fn, ("A", "B"), flags, spec), as __reduce__ gives
            args, transposed, spec = args[0], (args[1] if len(args) > 1 else transposed), (args[2] if len(args) > 2 else spec)
        if len(args) != MATRIX_ARITY[fn] or not all(isinstance(a, str) for a in args):
            raise TypeError(f"{fn} takes {MATRIX_ARITY[fn]} tensor name{'s' if MATRIX_ARITY[fn] != 1 else ''}, not {args!r}")
        flags = tuple(bool(t) for t in transposed) if transposed is not None else (False,) * len(args)
        if len(flags) != len(args) or (any(flags) and fn != MATMUL):
            raise TypeError(f"{fn} takes no transposed argument flags {flags!r}")
        spec = tuple(tuple(ix) for ix in spec or ())
        if (fn == CONTRACT) != bool(spec) or (spec and len(spec) != 3):
            raise TypeError(f"{fn} needs an index spec (A's, B's, the result's) exactly when it is {CONTRACT}")
        return super().__new__(cls, fn, tuple(args), flags, spec)

    @property
    def order(self) -> int:
        """The order of the result: 2 (``inv``, ``adj``, ``matmul``, ``gram``), 0 (``det``, ``logdet``), a contraction's."""
        return len(self.spec[2]) if self.spec else 2 if self.fn in (MATMUL, GRAM) else MATRIX_FUNCTIONS[self.fn]

    @property
    def tensor(self) -> str:
        """The argument of a one-argument function (``inv``, ``adj``, ``det``, ``logdet``)."""
        if len(self.args) != 1:
            raise AttributeError(f"{self.fn} has {len(self.args)} arguments: read .args")
        return self.args[0]


def format_matrix_call(fn: str, args: tuple[str, ...], transposed: tuple[bool, ...] = (), spec: Any = ()) -> str:
    """``matmul(A, transpose(B))``: the call as L1 and L2 print it (an argument read transposed is wrapped)."""
    if spec:
        return format_contract(args, spec)
    flags = transposed or (False,) * len(args)
    return f"{fn}({', '.join(f'transpose({a})' if t else a for a, t in zip(args, flags))})"


# ---------------------------------------------------------------------------
# Small constructors used by passes (no folding: see module docstring)
# ---------------------------------------------------------------------------

ZERO = Const(0)
ONE = Const(1)


def index_value(ix: Affine) -> Expr:
    """The value of the index expression ``ix``, in the canonical form the parser gives.

    Each term is ``#index[v]`` of a single name (or ``//``/``%`` atom), scaled
    by an integer :class:`Const` and summed in the affine's term order, the
    constant last: ``2*i - j + 1`` is ``2 * i - j + 1`` as the parser reads
    it, so a printed index value parses back to the same tree.
    """
    out: Expr | None = None
    for atom, coeff in ix.terms:
        base = Access(INDEX_VALUE, (Affine.var(atom) if isinstance(atom, str) else Affine.atom(atom),))
        mag = abs(coeff) if out is not None else coeff
        term = base if mag == 1 else (Unary("neg", base) if mag == -1 else Binary("*", Const(mag), base))
        out = term if out is None else Binary("+" if coeff > 0 else "-", out, term)
    if out is None:
        return Const(ix.const)
    if ix.const:
        out = Binary("+" if ix.const > 0 else "-", out, Const(abs(ix.const)))
    return out


def is_index_value(e: Expr) -> bool:
    """``#index[e]``: an index expression used as a value (see :data:`INDEX_VALUE`)."""
    return isinstance(e, Access) and e.tensor == INDEX_VALUE


def _simple_index_value(e: Access) -> bool:
    """One name or atom with coefficient 1: printed as itself, every other index value as its canonical tree."""
    (ix,) = e.indices
    return ix.const == 0 and len(ix.terms) == 1 and ix.terms[0][1] == 1


def neg(e: Expr) -> Expr:
    return Unary("neg", e)


def is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


def is_one(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 1


def is_guard(e: Expr) -> bool:
    """``where(c, e, 0)``: zero wherever the condition fails (a Kronecker delta when c is an equality)."""
    return isinstance(e, Where) and is_zero(e.other)


# ---------------------------------------------------------------------------
# Traversal helpers
# ---------------------------------------------------------------------------


def postorder(root: Expr) -> list[Expr]:
    """Distinct nodes of the DAG, children before parents, deterministic order.

    An explicit stack (a flat sum of n terms is n levels deep).  Nodes are
    their own set keys: structural equality is identity (hash-consing), and
    hashing the node is cheaper than calling ``id``.  A ``None`` on the stack
    means "the node below me is complete".
    """
    seen: set[Expr] = set()
    out: list[Expr] = []
    stack: list[Expr | None] = [root]
    pop, push, append, add = stack.pop, stack.append, out.append, seen.add
    while stack:
        node = pop()
        if node is None:
            append(pop())  # type: ignore[arg-type]
            continue
        if node in seen:
            continue
        add(node)
        push(node)
        push(None)
        for c in reversed(node.children()):
            if c not in seen:
                push(c)
    return out


def rebuild(node: Expr, children: tuple[Expr, ...]) -> Expr:
    """Same node with new children."""
    if isinstance(node, Unary):
        return Unary(node.op, children[0])
    if isinstance(node, Binary):
        return Binary(node.op, children[0], children[1])
    if isinstance(node, Where):
        return Where(node.cond, children[0], children[1])
    if isinstance(node, Select):
        return Select(node.op, *children)
    if isinstance(node, Sum):
        return Sum(node.var, node.lo, node.hi, children[0])
    if isinstance(node, CSum):
        return CSum(node.vars, node.constraints, children[0])
    if isinstance(node, Reduce):
        return Reduce(node.op, node.var, node.lo, node.hi, children[0])
    if hasattr(node, "with_children"):  # node kinds defined elsewhere (tcc.ir.user_functions.Call)
        return node.with_children(children)
    return node


def transform(root: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """Bottom-up rewrite: ``fn`` sees each node after its children were rewritten."""
    memo: dict[int, Expr] = {}
    for node in postorder(root):
        kids = node.children()
        new_kids = tuple(memo[id(k)] for k in kids)
        rebuilt = rebuild(node, new_kids) if new_kids != kids else node
        memo[id(node)] = fn(rebuilt)
    return memo[id(root)]


def bound_vars(node: Expr) -> tuple[str, ...]:
    if isinstance(node, RANGED):
        return (node.var,)
    if isinstance(node, CSum):
        return node.vars
    return ()


def local_index_names(node: Expr) -> tuple[str, ...]:
    """Names used by the node itself (not its children)."""
    if isinstance(node, Access):
        return tuple(n for ix in node.indices for n in ix.names())
    if isinstance(node, Where):
        return node.cond.names()
    if isinstance(node, RANGED):
        return tuple(n for b in node.lo + node.hi for n in b.names())
    if isinstance(node, CSum):
        return tuple(n for c in node.constraints for n in c.names())
    return ()


def free_names(root: Expr, memo: "dict[Expr, tuple[str, ...]] | None" = None) -> tuple[str, ...]:
    """Index and size names free in the expression (bound sum variables excluded).

    ``memo`` (node -> names), when given, is read and filled: a pass asking
    about many overlapping subexpressions (every factor of a long product)
    shares it so each node is visited once in all, not once per question.
    Keys are the nodes themselves, which keeps them alive while the memo is.
    """
    if memo is None:
        memo = {}
    else:
        hit = memo.get(root)
        if hit is not None:
            return hit
    for node in postorder_except(root, memo):
        names: dict[str, None] = dict.fromkeys(local_index_names(node))
        inner: dict[str, None] = {}
        for c in node.children():
            inner.update(dict.fromkeys(memo[c]))
        bv = bound_vars(node)
        if isinstance(node, RANGED):
            # the bounds of a sum are outside its scope
            names.update((n, None) for n in inner if n not in bv)
        else:
            for n in inner:
                if n not in bv:
                    names[n] = None
            if isinstance(node, CSum):
                names = {n: None for n in names if n not in bv}
        memo[node] = tuple(names)
    return memo[root]


def postorder_except(root: Expr, known: "dict[Expr, Any]") -> list[Expr]:
    """:func:`postorder` of ``root`` without the nodes in ``known`` (nor anything only under them).

    For memoised bottom-up computations asked about many overlapping
    subexpressions: a node whose answer is known is not walked again, so the
    questions together cost the size of the DAG, not the sum of their sizes.
    """
    if not known:
        return postorder(root)
    kids = root.children()
    if all(c in known for c in kids):  # the usual question of a bottom-up walk: only root is new
        return [] if root in known else [root]
    seen: set[Expr] = set()
    out: list[Expr] = []
    stack: list[Expr | None] = [root]
    while stack:
        node = stack.pop()
        if node is None:
            out.append(stack.pop())  # type: ignore[arg-type]
            continue
        if node in seen or node in known:
            continue
        seen.add(node)
        stack.append(node)
        stack.append(None)
        for c in reversed(node.children()):
            if c not in seen and c not in known:
                stack.append(c)
    return out


def accessed_tensors(root: Expr) -> tuple[str, ...]:
    """Tensors the expression reads, by an access or as a matrix function's argument."""
    out: dict[str, None] = {}
    for n in postorder(root):
        if isinstance(n, Access):
            out[n.tensor] = None
        elif isinstance(n, MatrixFn):
            out.update(dict.fromkeys(n.args))
    return tuple(out)


def all_names(root: Expr) -> tuple[str, ...]:
    """Every index name mentioned anywhere, bound or free (for fresh-name generation)."""
    out: dict[str, None] = {}
    for node in postorder(root):
        out.update(dict.fromkeys(local_index_names(node)))
        out.update(dict.fromkeys(bound_vars(node)))
    return tuple(out)


# ---------------------------------------------------------------------------
# Text form (``str(node)``; ``printer.format_program`` prints whole programs)
# ---------------------------------------------------------------------------
#
# The printed text parses back to the same node.  Parentheses are the minimal
# ones that make the parse unambiguous: the right operand of a
# left-associative operator is parenthesised at equal precedence, because
# ``a + (b + c)`` and ``a + b + c`` are different trees.

# precedence levels
_ADD, _MUL, _UNARY, _POW, _ATOM = 1, 2, 3, 4, 5
_BIN_LEVEL = {"+": _ADD, "-": _ADD, "*": _MUL, "/": _MUL, "**": _POW}


def format_const(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    text = repr(float(value))
    return text


def _level(e: Expr) -> int:
    if isinstance(e, Binary):
        return _BIN_LEVEL.get(e.op, _ATOM)  # max(a, b) is written as a call
    if isinstance(e, Unary) and e.op == "neg":
        return _UNARY
    if isinstance(e, Const) and (e.value < 0 or (isinstance(e.value, float) and str(e.value).startswith("-"))):
        return _UNARY
    return _ATOM


def _bounds(items: tuple[Affine, ...], fn: str) -> str:
    if len(items) == 1:
        return format_affine(items[0])
    return f"{fn}({', '.join(format_affine(a) for a in items)})"


#: What the printer's work stack holds: text to write, or a node to print
#: with the precedence its position requires.
_Item = Union[str, Tuple[Expr, int]]


class ExprPrinter:
    """Prints expressions with an explicit work stack, never by recursion.

    A flat sum of 100,000 terms is a left-deep tree 100,000 levels deep, and
    passes build such chains too (an adjoint accumulates one term per use):
    a recursive printer overflows Python's stack at a few hundred levels.
    The text is written piece by piece into one list, so printing costs time
    linear in its length; caching each node's whole string, as a recursive
    printer naturally does, would copy every prefix of a long chain and be
    quadratic.  Only leaves (accesses, constants) are cached: they repeat.
    """

    def __init__(self) -> None:
        self.leaves: dict[int, str] = {}

    def expr(self, e: Expr) -> str:
        return self._write([(e, 0)])

    def _write(self, stack: list[_Item]) -> str:
        out: list[str] = []
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                out.append(item)
                continue
            e, min_level = item
            if isinstance(e, Access) and e.tensor == INDEX_VALUE and not _simple_index_value(e):
                stack.append((index_value(e.indices[0]), min_level))  # as the parser reads it back
                continue
            if isinstance(e, (Const, Access, MatrixFn)):
                text = self.leaves.get(id(e))
                if text is None:
                    text = self.leaves[id(e)] = _leaf(e)
                out.append(f"({text})" if _level(e) < min_level else text)
                continue
            pieces = self._pieces(e)
            if _level(e) < min_level:
                pieces = ["(", *pieces, ")"]
            stack.extend(reversed(pieces))
        return "".join(out)

    @staticmethod
    def _pieces(e: Expr) -> list[_Item]:
        """The node's text, with its operands left as (node, precedence) items."""
        if isinstance(e, Unary):
            if e.op == "neg":
                if isinstance(e.operand, Const):
                    # "-3" is the literal Const(-3); keep the negation visible
                    return ["-(", (e.operand, 0), ")"]
                return ["-", (e.operand, _POW)]
            return [f"{e.op}(", (e.operand, 0), ")"]
        if isinstance(e, Binary) and e.op in EXTREMES:
            return [f"{e.op}(", (e.lhs, 0), ", ", (e.rhs, 0), ")"]
        if isinstance(e, Select):
            return ["where(", (e.lhs, 0), f" {e.op} ", (e.rhs, 0), ", ", (e.then, 0), ", ", (e.other, 0), ")"]
        if isinstance(e, Binary):
            lvl = _BIN_LEVEL[e.op]
            if e.op == "**":
                # right-associative; the exponent may be a unary minus expression
                return [(e.lhs, _ATOM), "**", (e.rhs, _UNARY)]
            return [(e.lhs, lvl), f" {e.op} ", (e.rhs, lvl + 1)]
        if isinstance(e, Where):
            return [f"where({format_cond(e.cond)}, ", (e.then, 0), ", ", (e.other, 0), ")"]
        if isinstance(e, RANGED):
            heads = []
            node: Expr = e
            kind = "sum" if isinstance(e, Sum) else e.op

            def same(n: Expr) -> bool:
                return isinstance(n, Sum) if kind == "sum" else isinstance(n, Reduce) and n.op == kind

            while same(node):
                if node.has_range:
                    heads.append(f"{node.var}: {_bounds(node.lo, 'max')}..{_bounds(node.hi, 'min')}")
                else:
                    heads.append(node.var)
                node = node.body
                # only merge a chain where every link has a range or none has
                if same(node) and node.has_range != e.has_range:
                    break
            return [f"{kind}[{', '.join(heads)}](", (node, 0), ")"]
        if isinstance(e, CSum):
            cons = ", ".join(format_conjunct(c) for c in e.constraints)
            return [f"sum[{', '.join(e.vars)} | {cons}](", (e.body, 0), ")"]
        if hasattr(e, "text_pieces"):  # node kinds defined elsewhere print themselves
            return e.text_pieces()
        raise TypeError(f"cannot print {type(e).__name__}")


def _leaf(e: Expr) -> str:
    if isinstance(e, Const):
        return format_const(e.value)
    if isinstance(e, Access):
        if e.tensor == INDEX_VALUE:  # a name, or a // or % atom in parentheses
            text = format_affine(e.indices[0])
            return text if e.indices[0].names() and text.isidentifier() else f"({text})"
        if not e.indices:
            return e.tensor
        return f"{e.tensor}[{', '.join(format_affine(i) for i in e.indices)}]"
    assert isinstance(e, MatrixFn)
    return format_matrix_call(e.fn, e.args, e.transposed, e.spec)


def format_expr(e: Expr) -> str:
    return ExprPrinter().expr(e)
