"""Index conditions: the part of the recursive-descent parser that reads ``where``, constrained-sum and ``assume`` conditions.

    cond       := cand ('or' cand)* ; cand := cnot ('and' cnot)*
    cnot       := 'not' cnot | '(' cond ')' | index CMP index

A mixin of :class:`tcc.ir.parser.Parser` (it uses the parser's token cursor
and its ``index`` rule); kept apart so that the statement and expression
grammar stays one readable module.
"""
from __future__ import annotations

from typing import Any

from .diagnostics import TccError
from .expr import Expr, Select, Where
from .index import And, Compare, Cond, Not, Or
from .lexer import COMPARISON_OPS, LiteralError

__all__ = ["ConditionParser", "select"]


class ConditionParser:
    """``cond``, ``cand``, ``cnot`` and ``compare`` over the host parser's cursor."""

    # provided by the parser this is mixed into
    i: int
    depth: int
    peek: Any
    advance: Any
    enter: Any
    expect: Any
    error: Any
    unexpected: Any
    index: Any
    expr: Any
    value_names: set[str]

    def cond(self) -> Cond:
        parts = [self.cand()]
        while self.peek().is_word("or"):
            self.advance()
            parts.append(self.cand())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def cand(self) -> Cond:
        parts = [self.cnot()]
        while self.peek().is_word("and"):
            self.advance()
            parts.append(self.cnot())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def cnot(self) -> Cond:
        self.enter()
        try:
            tok = self.peek()
            if tok.is_word("not"):
                self.advance()
                return Not(self.cnot())
            if not tok.is_op("("):
                return self.compare()
            # '(' starts either a parenthesised condition or an index: `(i + 1) // 2 == j`
            save, depth = self.i, self.depth
            try:
                return self.compare()
            except TccError as e1:
                first = e1
            self.i, self.depth = save, depth
            try:
                self.advance()
                c = self.cond()
                self.expect(")")
                return c
            except TccError as e2:
                # report whichever reading got further
                a, b = first.loc, e2.loc
                raise first if a is not None and b is not None and (a.line, a.col) > (b.line, b.col) else e2
        finally:
            self.depth -= 1

    def compare(self) -> Compare:
        lhs = self.index()
        tok = self.peek()
        if not (tok.kind == "OP" and tok.value in COMPARISON_OPS):
            raise self.unexpected("a comparison operator", tok)
        self.advance()
        rhs = self.index()
        nxt = self.peek()
        if nxt.kind == "OP" and nxt.value in COMPARISON_OPS:
            raise self.error("chained comparisons are not allowed; use 'and'", nxt)
        return Compare(tok.value, lhs, rhs)

    # -- conditions of where(...), which may also compare values ---------------
    def where_condition(self) -> "GCond":
        """The condition of ``where``: an index condition (as :meth:`cond` reads it) or, where that
        fails, one that also compares values (``x[i] > 0 and i < n - 1``): see :func:`select`."""
        save, depth = self.i, self.depth
        try:
            cond = self.cond()
            values = sorted(set(cond.names()) & self.value_names)
            if not values and self.ends_condition():
                return ("idx", cond)
            first = (self.error(f"'{values[0]}' is a tensor, not an index", self.peek()) if values  # `s > 0`
                     else self.unexpected("','", self.peek()))  # `i < 3 / s`: values
        except LiteralError:  # wrong in any reading
            raise
        except TccError as e1:
            first = e1
        self.i, self.depth = save, depth
        try:
            return self.vor()
        except TccError as e2:
            a, b = first.loc, e2.loc
            raise first if a is not None and b is not None and (a.line, a.col) > (b.line, b.col) else e2

    def ends_condition(self) -> bool:
        """The rule that tells an index comparison from a value comparison in ``where``: a comparison is
        of indices when it reads as one *whole*, up to a token that ends a comparison there (``,``
        ``)`` ``and`` ``or``), and names no tensor or scalar; ``i < 3 / s`` reads ``i < 3`` and
        stops at ``/``, so it compares values (docs/language.md, "Conditions")."""
        tok = self.peek()
        return tok.is_op(",", ")") or tok.is_word("and", "or")

    def vor(self) -> "GCond":
        parts = [self.vand()]
        while self.peek().is_word("or"):
            self.advance()
            parts.append(self.vand())
        return parts[0] if len(parts) == 1 else ("or", parts)

    def vand(self) -> "GCond":
        parts = [self.vnot()]
        while self.peek().is_word("and"):
            self.advance()
            parts.append(self.vnot())
        return parts[0] if len(parts) == 1 else ("and", parts)

    def vnot(self) -> "GCond":
        self.enter()
        try:
            if self.peek().is_word("not"):
                self.advance()
                return ("not", self.vnot())
            save, depth = self.i, self.depth
            try:  # an index comparison, as in any condition, unless it names a tensor or scalar
                c = self.compare()
                if not set(c.names()) & self.value_names and self.ends_condition():
                    return ("idx", c)
            except LiteralError:  # wrong in any reading
                raise
            except TccError:
                pass
            self.i, self.depth = save, depth
            if self.peek().is_op("("):  # a parenthesised condition, or a value that starts with '('
                try:
                    self.advance()
                    inner = self.vor()
                    self.expect(")")
                    if not (self.peek().kind == "OP" and self.peek().value in COMPARISON_OPS):
                        return inner
                except TccError:
                    pass
                self.i, self.depth = save, depth
            lhs = self.expr()
            tok = self.peek()
            if not (tok.kind == "OP" and tok.value in COMPARISON_OPS):
                raise self.unexpected("a comparison operator", tok)
            self.advance()
            rhs = self.expr()
            nxt = self.peek()
            if nxt.kind == "OP" and nxt.value in COMPARISON_OPS:
                raise self.error("chained comparisons are not allowed; use 'and'", nxt)
            return ("val", tok.value, lhs, rhs)
        finally:
            self.depth -= 1


#: A condition of ``where`` as parsed: ("idx", Cond) | ("val", op, lhs, rhs) | ("not", c) | ("and"/"or", [c, ...])
GCond = tuple


def select(c: GCond, then: Expr, other: Expr) -> Expr:
    """``where(c, then, other)`` as nodes: an index condition is a :class:`Where`, a value comparison
    a :class:`Select`; ``not`` swaps the branches, ``and``/``or`` nest (``where(a and b, t, o)`` is
    ``where(a, where(b, t, o), o)``), so NaN and -0 behave as the comparisons themselves do."""
    kind = c[0]
    if kind == "idx":
        return Where(c[1], then, other)
    if kind == "val":
        return Select(c[1], c[2], c[3], then, other)
    if kind == "not":
        return select(c[1], other, then)
    parts = c[1]
    rest = parts[1:] if len(parts) > 2 else None
    tail = (kind, rest) if rest is not None else parts[1]
    if kind == "and":
        return select(parts[0], select(tail, then, other), other)
    return select(parts[0], then, select(tail, then, other))
