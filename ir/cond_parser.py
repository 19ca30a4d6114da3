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
from .index import And, Compare, Cond, Not, Or
from .lexer import COMPARISON_OPS

__all__ = ["ConditionParser"]


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
