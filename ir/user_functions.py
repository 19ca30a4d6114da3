"""User functions: ``def softplus(t) = log(1 + exp(t))``, inlined where they are called (issue 14).

    def NAME(p, q, ...) = expr       # a scalar function of values, usable after its definition

A mixin of :class:`tcc.ir.parser.Parser`.  The body may use its parameters,
constants, the built-in functions and user functions defined earlier; no
tensor, index or size (a function of values, not of positions).  A call
``softplus(x[i] - 1)`` is replaced by the body with each parameter replaced
by its argument, so everything after the parser -- the verifier, the
passes, derivatives (which come from the body), both backends -- sees
ordinary expressions, and the printed program shows the inlined form, which
parses back to the same IR.  Functions cannot recurse: a function is not
known in its own body, so a call of it there is reported as recursion.
"""
from __future__ import annotations

from typing import Any

from .expr import EXTREMES, Access, Expr, postorder, transform
from .lexer import KEYWORDS

__all__ = ["FunctionDefinitions"]


class FunctionDefinitions:
    """``def`` lines and the inlining of calls, over the host parser's cursor."""

    # provided by the parser this is mixed into
    peek: Any
    advance: Any
    expect: Any
    error: Any
    name: Any
    expr: Any
    scope: list[str]
    size_names: set[str]

    def starts_function_definition(self) -> bool:
        """``def NAME(`` at the start of a statement (a tensor may still be called ``def``)."""
        return self.peek().is_word("def") and self.peek(1).kind == "NAME" and self.peek(2).is_op("(")

    def function_definition(self) -> None:
        self.advance()  # 'def'
        ntok = self.peek()
        fname = ntok.value
        if fname in KEYWORDS or fname in EXTREMES:
            raise self.error(f"'{fname}' is a built-in; a user function needs another name", ntok)
        if fname in self.functions:
            raise self.error(f"function '{fname}' is already defined", ntok)
        self.advance()
        self.expect("(")
        params: list[str] = []
        while True:
            ptok = self.name("a parameter name")
            if ptok.value in params:
                raise self.error(f"parameter '{ptok.value}' appears twice", ptok)
            params.append(ptok.value)
            if not self.peek().is_op(","):
                break
            self.advance()
        self.expect(")")
        self.expect("=")
        saved = self.scope, self.size_names, self.defining
        self.scope, self.size_names, self.defining = [], set(), fname
        try:
            body = self.expr()
        finally:
            self.scope, self.size_names, self.defining = saved
        for node in postorder(body):
            if isinstance(node, Access) and (node.indices or node.tensor not in params):
                raise self.error(
                    f"the body of '{fname}' may use only its parameters ({', '.join(params)}), not '{node}'", ntok)
        self.functions[fname] = (tuple(params), body)

    def call(self, tok: Any) -> Expr:
        """``NAME(args)`` of a user function: its body with the arguments in place of the parameters."""
        params, body = self.functions[tok.value]
        self.advance()
        self.expect("(")
        args = [self.expr()]
        while self.peek().is_op(","):
            self.advance()
            args.append(self.expr())
        self.expect(")")
        if len(args) != len(params):
            raise self.error(f"'{tok.value}' takes {len(params)} argument{'s' if len(params) != 1 else ''}, "
                             f"got {len(args)}", tok)
        mapping = {Access(p, ()): a for p, a in zip(params, args)}
        return transform(body, lambda n: mapping.get(n, n))
