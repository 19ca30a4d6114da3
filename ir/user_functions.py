"""User functions: ``def softplus(t) = log(1 + exp(t))``, inlined where they are called.

    def NAME(p, q, ...) = expr                                  # inlined: derivatives from the body
    def NAME(p, q, ...) = expr with d(p) = expr, d(q) = expr    # custom derivatives, one per parameter

A mixin of :class:`tcc.ir.parser.Parser`.  The body may use its parameters,
constants, the built-in functions and user functions defined earlier; no
tensor, index or size (a function of values, not of positions).  A call
``softplus(x[i] - 1)`` is replaced by the body with each parameter replaced
by its argument, so everything after the parser -- the verifier, the
passes, derivatives (which come from the body), both backends -- sees
ordinary expressions, and the printed program shows the inlined form, which
parses back to the same IR.  Functions cannot recurse: a function is not
known in its own body, so a call of it there is reported as recursion.

A function **with custom derivatives** (``with d(p) = ...`` for every
parameter: a numerically stable form, a straight-through estimator) cannot
be inlined before differentiation: its calls are :class:`Call` nodes, whose
children are the arguments (so passes move, rename and substitute them as
any operand), whose value is the inlined body (``lower-loops`` and the
interpreter use :meth:`Call.value`), and whose derivative with respect to
argument ``k`` is the inlined ``d(p_k)`` -- what ``autodiff`` uses instead of
differentiating the body.  The printer writes the calls as calls and the
``def`` lines they need at the top of the program, so it parses back.
"""
from __future__ import annotations

from typing import Any

from .expr import EXTREMES, Access, Expr, postorder, transform
from .lexer import KEYWORDS

__all__ = ["Call", "FunctionDefinitions", "format_function", "functions_used"]


class Call(Expr):
    """``fn(args)`` of a user function with custom derivatives (see the module docstring)."""

    __slots__ = ("fn", "params", "body", "derivs", "args")
    _fields = ("fn", "params", "body", "derivs", "args")
    fn: str
    params: tuple[str, ...]
    body: Expr
    derivs: tuple[Expr, ...]
    args: tuple[Expr, ...]

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def with_children(self, children: tuple[Expr, ...]) -> "Call":
        return Call(self.fn, self.params, self.body, self.derivs, tuple(children))

    def text_pieces(self) -> list:
        pieces: list = [f"{self.fn}("]
        for k, a in enumerate(self.args):
            pieces += ([", "] if k else []) + [(a, 0)]
        return pieces + [")"]

    def _inline(self, e: Expr) -> Expr:
        mapping = {Access(p, ()): a for p, a in zip(self.params, self.args)}
        return transform(e, lambda n: mapping.get(n, n))

    def value(self) -> Expr:
        """The body with the arguments in place of the parameters."""
        return self._inline(self.body)

    def derivative(self, k: int) -> Expr:
        """The custom derivative with respect to argument ``k``, at the arguments."""
        return self._inline(self.derivs[k])


def format_function(c: Call) -> str:
    """The ``def`` line of a function with custom derivatives."""
    derivs = ", ".join(f"d({p}) = {d}" for p, d in zip(c.params, c.derivs))
    return f"def {c.fn}({', '.join(c.params)}) = {c.body} with {derivs}"


def functions_used(roots: list[Expr]) -> list[Call]:
    """One call per function with custom derivatives that ``roots`` use, those a body uses first."""
    found: dict[str, Call] = {}

    def visit(e: Expr) -> None:
        for n in postorder(e):
            if isinstance(n, Call) and n.fn not in found:
                for inner in (n.body, *n.derivs):
                    visit(inner)
                found.setdefault(n.fn, n)

    for r in roots:
        visit(r)
    return list(found.values())


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
    value_names: set[str]
    functions: dict
    defining: str | None
    unexpected: Any

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
        saved = self.scope, self.size_names, self.defining, self.value_names
        # in a body every name is a value: `where(s > 0, ...)` compares the parameter s
        self.scope, self.size_names, self.defining, self.value_names = [], set(), fname, self.value_names | set(params)
        try:
            body = self.expr()
            derivs = self.custom_derivatives(fname, params, ntok)
        finally:
            self.scope, self.size_names, self.defining, self.value_names = saved
        for e in (body, *derivs):
            for node in postorder(e):
                if isinstance(node, Access) and (node.indices or node.tensor not in params):
                    raise self.error(
                        f"the body of '{fname}' may use only its parameters ({', '.join(params)}), not '{node}'", ntok)
        self.functions[fname] = (tuple(params), body, tuple(derivs) if derivs else None)

    def custom_derivatives(self, fname: str, params: list[str], ntok: Any) -> list[Expr]:
        """``with d(p) = expr, ...``: one for every parameter, in any order (returned in parameter order)."""
        if not self.peek().is_word("with"):
            return []
        self.advance()
        given: dict[str, Expr] = {}
        while True:
            dtok = self.peek()
            if not (dtok.is_word("d") and self.peek(1).is_op("(")):
                raise self.unexpected("d(PARAMETER) = ...", dtok)
            self.advance()
            self.expect("(")
            ptok = self.name("a parameter name")
            if ptok.value not in params:
                raise self.error(f"'{ptok.value}' is not a parameter of '{fname}' ({', '.join(params)})", ptok)
            if ptok.value in given:
                raise self.error(f"d({ptok.value}) is given twice", ptok)
            self.expect(")")
            self.expect("=")
            given[ptok.value] = self.expr()
            if not self.peek().is_op(","):
                break
            self.advance()
        missing = [p for p in params if p not in given]
        if missing:
            raise self.error(f"'{fname}' needs a custom derivative for every parameter; missing: "
                             + ", ".join(f"d({p})" for p in missing), ntok)
        return [given[p] for p in params]

    def call(self, tok: Any) -> Expr:
        """``NAME(args)`` of a user function: its body with the arguments in place of the parameters."""
        params, body, derivs = self.functions[tok.value]
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
        if derivs is not None:
            return Call(tok.value, params, body, derivs, tuple(args))
        mapping = {Access(p, ()): a for p, a in zip(params, args)}
        return transform(body, lambda n: mapping.get(n, n))
