"""Print L1 programs in the tcc language.

The printed text parses back to the same IR (``print -> parse -> print`` is the
identity), so every dump can be replayed.  Parentheses are the minimal ones
that make the parse unambiguous: the right operand of a left-associative
operator is parenthesised at equal precedence, because ``a + (b + c)`` and
``a + b + c`` are different trees.
"""
from __future__ import annotations

from typing import Tuple, Union

from .expr import Access, Binary, Const, CSum, Expr, MatrixFn, Sum, Unary, Where
from .index import Affine, And, Compare, Cond, Not, Or, format_affine

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
        return _BIN_LEVEL[e.op]
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


class _Printer:
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

    def wrap(self, e: Expr, min_level: int) -> str:
        return self._write([(e, min_level)])

    def _write(self, stack: list[_Item]) -> str:
        out: list[str] = []
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                out.append(item)
                continue
            e, min_level = item
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
        if isinstance(e, Binary):
            lvl = _BIN_LEVEL[e.op]
            if e.op == "**":
                # right-associative; the exponent may be a unary minus expression
                return [(e.lhs, _ATOM), "**", (e.rhs, _UNARY)]
            return [(e.lhs, lvl), f" {e.op} ", (e.rhs, lvl + 1)]
        if isinstance(e, Where):
            return [f"where({format_cond(e.cond)}, ", (e.then, 0), ", ", (e.other, 0), ")"]
        if isinstance(e, Sum):
            heads = []
            node: Expr = e
            while isinstance(node, Sum):
                if node.has_range:
                    heads.append(f"{node.var}: {_bounds(node.lo, 'max')}..{_bounds(node.hi, 'min')}")
                else:
                    heads.append(node.var)
                node = node.body
                # only merge a chain where every link has a range or none has
                if isinstance(node, Sum) and node.has_range != e.has_range:
                    break
            return [f"sum[{', '.join(heads)}](", (node, 0), ")"]
        if isinstance(e, CSum):
            cons = ", ".join(format_cond(c, _AND_LEVEL + 1) for c in e.constraints)
            return [f"sum[{', '.join(e.vars)} | {cons}](", (e.body, 0), ")"]
        raise TypeError(f"cannot print {type(e).__name__}")


def _leaf(e: Expr) -> str:
    if isinstance(e, Const):
        return format_const(e.value)
    if isinstance(e, Access):
        if not e.indices:
            return e.tensor
        return f"{e.tensor}[{', '.join(format_affine(i) for i in e.indices)}]"
    assert isinstance(e, MatrixFn)
    return f"{e.fn}({', '.join(e.args)})"


_OR_LEVEL, _AND_LEVEL, _NOT_LEVEL, _CMP_LEVEL = 1, 2, 3, 4


def _cond_level(c: Cond) -> int:
    if isinstance(c, Or):
        return _OR_LEVEL
    if isinstance(c, And):
        return _AND_LEVEL
    if isinstance(c, Not):
        return _NOT_LEVEL
    return _CMP_LEVEL


def format_cond(c: Cond, min_level: int = 0) -> str:
    if isinstance(c, Compare):
        s = f"{format_affine(c.lhs)} {c.op} {format_affine(c.rhs)}"
    elif isinstance(c, And):
        s = " and ".join(format_cond(p, _AND_LEVEL + 1) for p in c.parts)
    elif isinstance(c, Or):
        s = " or ".join(format_cond(p, _OR_LEVEL + 1) for p in c.parts)
    elif isinstance(c, Not):
        s = "not " + format_cond(c.part, _NOT_LEVEL)
    else:
        raise TypeError(c)
    return f"({s})" if _cond_level(c) < min_level else s


def format_expr(e: Expr) -> str:
    return _Printer().expr(e)


def _decl(name: str, extents: tuple[Affine, ...]) -> str:
    if not extents:
        return name
    return f"{name}[{', '.join(format_affine(x) for x in extents)}]"


def format_program(program) -> str:  # noqa: ANN001 - Program, avoided import cycle
    lines: list[str] = []
    if program.inputs:
        lines.append("input " + ", ".join(_decl(d.name, d.extents) for d in program.inputs))
    outs = []
    for name in program.outputs:
        d = program.definition(name)
        if d is not None and d.extents is not None:
            outs.append(_decl(name, d.extents))
        else:
            outs.append(name)
    if outs:
        lines.append("output " + ", ".join(outs))
    locs = [
        _decl(d.name, d.extents)
        for d in program.definitions
        if d.name not in program.outputs and d.extents is not None
    ]
    if locs:
        lines.append("local " + ", ".join(locs))
    printer = _Printer()
    for d in program.definitions:
        lhs = d.name if not d.indices else f"{d.name}[{', '.join(d.indices)}]"
        body = printer.expr(d.body)
        if isinstance(d.body, MatrixFn) and d.indices:
            body += f"[{', '.join(d.indices)}]"  # the one place a matrix function is written
        lines.append(f"{lhs} = {body}")
    return "\n".join(lines) + "\n"
