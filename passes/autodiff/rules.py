"""The local derivative rules that reverse and forward mode share (Urban and van der Smagt, sec. 4; Laue et al., sec. 3).

Both modes apply the chain rule node by node; what differs is only the
direction.  :func:`child_adjoints` is the one table of local derivatives:
reverse mode calls it with a node's adjoint, forward mode with the tangent of
one child (the entries for that child are its term of the tangent).  The
argument checks and the set of definitions on a path from the inputs to the
result are shared too, so both modes refuse the same programs in the same
words and differentiate the same definitions.

The construction helpers skip neutral elements and nothing else: folding is
``simplify``'s job, and a derivative program must come out the same whichever
mode built its pieces.
"""
from __future__ import annotations

from typing import Sequence

import networkx as nx

from tcc.ir.diagnostics import TccError
from tcc.ir.graph import definition_graph
from tcc.ir.user_functions import Call
from tcc.ir.expr import EXTREMES, ONE, ZERO, Binary, Const, Expr, Select, Unary, Where, fresh_name, is_one, is_zero, neg
from tcc.ir.index import Affine, negate
from tcc.ir.program import Definition, Program

__all__ = ["mul", "add", "div", "child_adjoints", "check_arguments", "relevant_definitions"]

# ---------------------------------------------------------------------------
# construction helpers that skip neutral elements (no other folding)
# ---------------------------------------------------------------------------


def mul(a: Expr, b: Expr) -> Expr:
    """Product that keeps guards outermost: ``where(c, x, 0) * y`` is ``where(c, x * y, 0)``.

    A guard at the top of an adjoint is what sum-liberation can turn into
    range constraints, so it must not get buried inside products.
    """
    if is_one(a):
        return b
    if is_one(b):
        return a
    if isinstance(a, Where) and is_zero(a.other):
        return Where(a.cond, mul(a.then, b), ZERO)
    if isinstance(b, Where) and is_zero(b.other):
        return Where(b.cond, mul(a, b.then), ZERO)
    return Binary("*", a, b)


def add(a: Expr | None, b: Expr) -> Expr:
    """``a + b``, where ``a`` is an accumulator that may have no term yet (``None``)."""
    return b if a is None else Binary("+", a, b)


def div(a: Expr, b: Expr) -> Expr:
    return Binary("/", a, b)


def _pow(a: Expr, b: Expr) -> Expr:
    return Binary("**", a, b)


def _fn(name: str, a: Expr) -> Expr:
    return Unary(name, a)


# ---------------------------------------------------------------------------
# local derivatives: adjoint of a child given the adjoint ``a`` of its parent
# ---------------------------------------------------------------------------


def _one_at_zero(e: Expr) -> Expr:
    """``e + (1 - abs(sign(e)))``: ``e`` itself, except 1 where ``e`` is (+-)0.

    ``where`` decides on indices only, never on values, so the substitution
    is arithmetic: ``abs(sign(e))`` is 1 for every nonzero ``e`` (adding the
    exact 0 leaves ``e`` unchanged), 0 at a zero, and NaN stays NaN.
    """
    return Binary("+", e, Binary("-", ONE, _fn("abs", _fn("sign", e))))


def _pow_adjoints(x: Expr, y: Expr, a: Expr, value: Expr) -> list[tuple[Expr, Expr]]:
    """The adjoints of ``x ** y``, exact where the textbook rules give 0 * inf.

    ``d/dx = y * x**(y - 1)``: at ``y = 0`` (``x**0`` is the constant 1) the
    derivative is 0, but ``0 * 0**-1`` is NaN at ``x = 0``; the exponent is
    therefore written ``y - abs(sign(y))``, which is ``y - 1`` for every
    nonzero ``y`` and 0 at ``y = 0``, where ``0 * x**0 = 0``.  ``d/dy = x**y * log(x)``: at ``x = 0``, ``y > 0`` the
    power is constantly 0 and so is the derivative, but ``0 * log(0)`` is
    ``0 * -inf = NaN``; the logarithm is taken of ``_one_at_zero(x)``
    (``log(1) = 0``), as JAX does.  A constant exponent needs neither
    guard: ``simplify`` folds ``x**0`` to 1 and there is no ``d/dy``.
    """
    if isinstance(y, Const):
        return [(x, mul(mul(a, y), _pow(x, Binary("-", y, ONE))))]
    return [
        (x, mul(mul(a, y), _pow(x, Binary("-", y, _fn("abs", _fn("sign", y)))))),
        (y, mul(mul(a, value), _fn("log", _one_at_zero(x)))),
    ]


def child_adjoints(node: Expr, a: Expr, value: Expr) -> list[tuple[Expr, Expr]]:
    """``[(child, contribution)]``; ``value`` is the node's own value (maybe ``h[α]``)."""
    if isinstance(node, Unary):
        u = node.operand
        op = node.op
        if op == "neg":
            d = neg(a)
        elif op == "exp":
            d = mul(a, value)
        elif op == "log":
            d = div(a, u)
        elif op == "sqrt":
            d = div(a, mul(Const(2), value))
        elif op == "sin":
            d = mul(a, _fn("cos", u))
        elif op == "cos":
            d = neg(mul(a, _fn("sin", u)))
        elif op == "tan":
            d = mul(a, Binary("+", ONE, _pow(value, Const(2))))
        elif op == "asin":
            d = div(a, _fn("sqrt", Binary("-", ONE, _pow(u, Const(2)))))
        elif op == "acos":
            d = neg(div(a, _fn("sqrt", Binary("-", ONE, _pow(u, Const(2))))))
        elif op == "atan":
            d = div(a, Binary("+", ONE, _pow(u, Const(2))))
        elif op == "sinh":
            d = mul(a, _fn("cosh", u))
        elif op == "cosh":
            d = mul(a, _fn("sinh", u))
        elif op == "tanh":
            d = mul(a, Binary("-", ONE, _pow(value, Const(2))))
        elif op == "abs":
            d = mul(a, _fn("sign", u))
        elif op == "sign":
            return []  # piecewise constant: zero derivative
        elif op == "relu":
            # relu(u) >= 0, so sign(relu(u)) is the step function 1[u > 0]
            d = mul(a, _fn("sign", value))
        elif op == "sigmoid":
            d = mul(mul(a, value), Binary("-", ONE, value))
        else:  # pragma: no cover - the parser admits no other function
            raise TccError(f"no derivative rule for '{op}'")
        return [(u, d)]
    if isinstance(node, Binary):
        x, y = node.lhs, node.rhs
        if node.op == "+":
            return [(x, a), (y, a)]
        if node.op == "-":
            return [(x, a), (y, neg(a))]
        if node.op == "*":
            return [(x, mul(a, y)), (y, mul(a, x))]
        if node.op == "/":
            return [(x, div(a, y)), (y, neg(div(mul(a, x), _pow(y, Const(2)))))]
        if node.op == "**":
            return _pow_adjoints(x, y, a, value)
        if node.op in EXTREMES:
            return _extreme_adjoints(node, a, value)
    if isinstance(node, Where):
        return [(node.then, Where(node.cond, a, ZERO)), (node.other, Where(negate(node.cond), a, ZERO))]
    if isinstance(node, Call):  # a user function with custom derivatives: its d(p), not its body's
        return [(arg, mul(a, node.derivative(k))) for k, arg in enumerate(node.args)]
    if isinstance(node, Select):  # the condition is held fixed: only the chosen branch gets the adjoint
        return [(node.then, Select(node.op, node.lhs, node.rhs, a, ZERO)),
                (node.other, Select(node.op, node.lhs, node.rhs, ZERO, a))]
    return []


def _extreme_adjoints(node: Binary, a: Expr, value: Expr) -> list[tuple[Expr, Expr]]:
    """``max(x, y)`` (``min``): the adjoint goes to the arguments equal to the result, split equally at ties.

    As JAX and PyTorch do for a max reduction, and as a gather: each
    argument is compared with the result ``value`` (the stored ``h[α]`` at
    a definition's root), never scattered to an argmax.  ``max(a, b, c)``
    is ``max(max(a, b), c)``; counting the ties among all the *leaves* of
    the chain (not just the two operands) makes the shares equal for every
    argument: at ``a = b = c`` the inner ``max(a, b)`` gets 2/3 and splits
    it in halves, 1/3 each.  NaN makes every comparison false: 0/0, NaN.
    """
    def leaves(e: Expr) -> list[Expr]:
        out, stack = [], [e]
        while stack:
            x = stack.pop()
            if isinstance(x, Binary) and x.op == node.op:
                stack += [x.rhs, x.lhs]
            else:
                out.append(x)
        return out

    def ties(e: Expr) -> Expr:
        count: Expr | None = None
        for leaf in leaves(e):
            count = add(count, Select("==", leaf, value, ONE, ZERO))
        assert count is not None
        return count

    tx, ty = ties(node.lhs), ties(node.rhs)
    total = Binary("+", tx, ty)
    return [(node.lhs, div(mul(a, tx), total)), (node.rhs, div(mul(a, ty), total))]


# ---------------------------------------------------------------------------
# what both modes differentiate
# ---------------------------------------------------------------------------


def check_arguments(program: Program, of: str, wrt: Sequence[str]) -> Definition:
    """The definition ``of``, after the checks both modes make (same words in both)."""
    if not of:
        raise TccError("autodiff needs the definition to differentiate: autodiff{of=NAME wrt=X,Y}")
    if not wrt:
        raise TccError("autodiff needs at least one input to differentiate with respect to (wrt=...)")
    f = program.definition(of)
    if f is None:
        if program.input(of) is not None:
            raise TccError(f"'{of}' is an input; --of must name a definition")
        raise TccError(f"no definition named '{of}'")
    for x in wrt:
        if program.input(x) is None:
            if program.definition(x) is not None:
                raise TccError(f"'{x}' is a definition; --wrt takes inputs of the program")
            raise TccError(f"no input named '{x}'")
        if program.input(x).is_index:
            raise TccError(f"'{x}' is an index input: its entries are integers, and nothing is differentiated "
                           "with respect to them")
    if len(set(wrt)) != len(wrt):
        raise TccError("--wrt names an input twice")
    for d in program.definitions:
        if d.extents is None:
            raise TccError(f"autodiff needs the extents of '{d.name}': run infer-ranges first")
    return f


def relevant_definitions(program: Program, of: str, wrt: Sequence[str]) -> list[Definition]:
    """Definitions on a path from some ``wrt`` input to ``of`` (``of`` included), in program order."""
    g = definition_graph(program)
    needed = nx.ancestors(g, of) | {of}  # what f reads, transitively (and f)
    influenced = set().union(*(nx.descendants(g, x) for x in wrt if x in g))  # what reads a wrt input
    return [d for d in program.definitions if d.name in needed and d.name in influenced]


class Derivation:
    """What a derivative of either mode keeps while it names new tensors and indices.

    One namespace for everything the program already uses -- tensors, sizes
    and indices alike -- so that a new tensor never takes an index's name;
    names are taken in the order the mode asks for them, which fixes the
    printed derivative.
    """

    def __init__(self, program: Program) -> None:
        self.program = program
        self.taken = program.names_in_use()

    def allocate(self, base: str) -> str:
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        return name

    def extents_of(self, name: str) -> tuple[Affine, ...]:
        ext = self.program.extents_of(name)
        assert ext is not None
        return ext
