"""Lippmann's input form (sec. 2.3): ``declare ... expression ... derivative wrt ...``.

    declare A 2 x 1 expression (A + 1) *(ij,j->i) x derivative wrt A

declares each tensor with its order only, gives one whole-tensor expression
and names the argument.  It becomes an ordinary tcc program: every axis of a
declared tensor gets a size name (``n1``, ``n2``, ... in order of declaration),
the expression unifies the ones it says are equal (``A``'s second axis and
``x``'s only one above: ``input A[n1, n2], x[n2]``), and the expression is the
definition ``f`` (or the first free name ``f2``, ...).  ``tcc grad`` of such a
file prints the full derivative tensor, of order order(f) + order(x), as the
appendix of the thesis does.

This module is the grammar only: :func:`read_lippmann` reads the form from a
:class:`tcc.ir.parser.Parser` it is handed (as :mod:`tcc.ir.einstein` does),
so the parser imports it and not the other way round.  The one loader that
tells the two forms apart is :func:`tcc.ir.parser.parse_source`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .einstein import TensorExprParser
from .expr import fresh_name
from .index import Affine
from .lexer import KEYWORDS
from .program import Definition, Program, TensorDecl

__all__ = ["LippmannProblem", "is_lippmann", "read_lippmann"]


@dataclass(frozen=True)
class LippmannProblem:
    program: Program
    of: str   # the definition holding the expression
    wrt: str  # the argument after `derivative wrt`

    def target(self, of: str, wrt: list[str]) -> tuple[Program, str, list[str]]:
        """``(program, of, wrt)`` of a derivative where the caller's ``of``/``wrt`` win and the
        form's own fill what the caller left empty (the API and the command line alike)."""
        return self.program, of or self.of, wrt or [self.wrt]


def is_lippmann(text: str) -> bool:
    """Whether the first word of the text (comments skipped) is ``declare``."""
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            return words[0] == "declare"
    return False


def read_lippmann(p) -> LippmannProblem:  # noqa: ANN001 - tcc.ir.parser.Parser, which imports this module
    """The whole input, in Lippmann's form, from the parser ``p`` at its first token."""
    tok = p.peek()
    if not tok.is_word("declare"):
        raise p.unexpected("'declare'", tok)
    p.advance()
    orders: dict[str, int] = {}
    decl_toks = {}
    while not p.peek().is_word("expression"):
        if p.peek().kind == "NEWLINE":
            p.advance()
            continue
        ntok = p.peek()
        if ntok.kind != "NAME":
            raise p.unexpected("a tensor name or 'expression'", ntok)
        if ntok.value in KEYWORDS or ntok.value in ("delta", "derivative", "wrt", "declare"):
            raise p.error(f"'{ntok.value}' is a reserved word", ntok)
        p.advance()
        otok = p.peek()
        if otok.kind != "INT":
            raise p.unexpected(f"the order of '{ntok.value}' (an integer)", otok)
        p.advance()
        if ntok.value in orders:
            raise p.error(f"'{ntok.value}' is declared twice", ntok)
        orders[ntok.value] = int(otok.value)
        decl_toks[ntok.value] = ntok
    if not orders:
        raise p.error("'declare' needs at least one tensor and its order", p.peek())
    etok = p.advance()  # 'expression'
    # one size name per axis; the expression decides which are equal
    taken = set(orders) | {"delta"}
    sizes: list[str] = []
    extents: dict[str, tuple[Affine, ...] | None] = {}
    for name, order in orders.items():
        ext = []
        for _ in range(order):
            s = fresh_name(f"n{len(sizes) + 1}", taken)
            taken.add(s)
            sizes.append(s)
            ext.append(Affine.var(s))
        extents[name] = tuple(ext)
    of = fresh_name("f", taken)
    tp = TensorExprParser(p, dict(orders), dict(extents), taken, merge_sizes=True, size_order=sizes.index)
    if p.peek().is_word("derivative"):
        raise p.unexpected("an expression", p.peek())
    outlined, definition = tp.definition(of, etok)
    while p.peek().kind == "NEWLINE":
        p.advance()
    wtok = p.peek()
    if not wtok.is_word("derivative"):
        raise p.unexpected("'derivative wrt'", wtok)
    p.advance()
    if not p.peek().is_word("wrt"):
        raise p.unexpected("'wrt'", p.peek())
    p.advance()
    xtok = p.peek()
    if xtok.kind != "NAME":
        raise p.unexpected("the name of a declared tensor", xtok)
    p.advance()
    if xtok.value not in orders:
        known = ", ".join(orders)
        raise p.error(f"'{xtok.value}' is not declared (declared: {known})", xtok)
    while p.peek().kind == "NEWLINE":
        p.advance()
    if p.peek().kind != "EOF":
        raise p.unexpected("end of input", p.peek())
    inputs = tuple(TensorDecl(n, tp.sizes(extents[n] or ()), decl_toks[n].loc) for n in orders)
    defs = tuple(
        Definition(d.name, d.indices, d.body, None if d.extents is None else tp.sizes(d.extents), d.loc)
        for d in outlined + [definition]
    )
    program = Program(inputs, defs, (of,), source=p.source)
    return LippmannProblem(program, of, xtok.value)
