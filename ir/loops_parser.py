"""Parser of the L2 loop IR: the inverse of :func:`tcc.ir.loops.format_loop_program`.

    file     := line*
    line     := 'sizes' NAME (',' NAME)*
              | ROLE buffer (',' buffer)*              ROLE: input, output, local, temp
              | 'kernel' NAME block
    buffer   := NAME ('[' index (',' index)* ']')?
    block    := '{' NEWLINE stmt* '}'
    stmt     := 'parallel'? 'for' NAME 'in' bound '..' bound block
              | 'let' NAME '=' expr
              | 'local' NAME '=' expr
              | 'if' cond block ('else' block)?       'else' on the line of the '}'
              | 'extern' FN '(' NAME ')' '->' NAME     FN: inv, adj, det, logdet
              | NAME ('[' index (',' index)* ']')? ('=' | '+=') expr

Every statement ends at the end of its line.  Expressions, index expressions,
``max(...)``/``min(...)`` bounds and conditions are read by the L1 parser
(:class:`tcc.ir.parser.Parser`), so the two levels share one syntax for them;
the L1 lexer has no braces, so ``{`` and ``}`` are cut out of the text before
it sees it and put back into its token stream at their positions.  ``#``
comments (the ``# tcc loops`` header, dump headers) are ignored.

``for``, ``let``, ``if``, ``parallel``, ``kernel`` and ``extern`` are not
reserved (L1 programs may use them as names): a statement is a loop only when
``for`` is followed by a name, a ``let`` when ``let`` is, an ``if`` when the
next token cannot follow a buffer name (``[``, ``=`` or ``+=``), an external
kernel when ``extern`` is followed by a matrix function's name.

Only syntax is checked here; :func:`tcc.ir.loops_verifier.verify_loops` checks
names, ranks, scopes and parallel loops.  Statements and buffers are recorded
in the program's :class:`~tcc.ir.program.SourceMap` so the verifier can report
where they are.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Iterator

from tcc.ir.diagnostics import TccError

from .contraction import CONTRACT, parse_contract_args, parse_index_names
from .expr import MATRIX_ARITY, Expr
from .index import Affine
from .lexer import Token, tokenize
from .loops import ROLES, Accumulate, Buffer, Extern, For, If, Kernel, Let, Local, LoopProgram, Stmt, Store
from .parser import MAX_DEPTH, Parser
from .diagnostics import Loc, SourceMap

__all__ = ["parse_loop_program", "LoopParser"]


def _tokens_with_braces(text: str, source: SourceMap) -> Iterator[Token]:
    """The L1 tokens of ``text`` with ``{`` and ``}`` as ``OP`` tokens in between."""
    braces: list[int] = []
    chars = list(text)
    in_comment = False
    for i, ch in enumerate(text):
        if ch == "#":
            in_comment = True
        elif ch == "\n":
            in_comment = False
        elif ch in "{}" and not in_comment:
            braces.append(i)
            chars[i] = " "  # same length: every other token keeps its offset, line and column
    line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]

    def brace(pos: int) -> Token:
        line = bisect_right(line_starts, pos)
        return Token("OP", text[pos], line, pos - line_starts[line - 1] + 1, pos, pos + 1)

    def offset(loc: Loc) -> int:
        return line_starts[loc.line - 1] + loc.col - 1 if 0 < loc.line <= len(line_starts) else len(text)

    inner = tokenize("".join(chars), source)
    b = 0
    while True:
        try:
            tok = next(inner)
        except TccError as e:
            # braces before the bad character come first, as they would from one lexer
            at = offset(e.loc) if e.loc is not None else len(text)
            while b < len(braces) and braces[b] < at:
                yield brace(braces[b])
                b += 1
            raise
        if tok.kind == "EOF":
            while b < len(braces):
                last = brace(braces[b])
                yield last
                b += 1
                if last.end > tok.pos:
                    tok = Token("EOF", "", last.line, last.col + 1, last.end, last.end)
            yield tok
            return
        while b < len(braces) and braces[b] < tok.pos:
            yield brace(braces[b])
            b += 1
        yield tok


class LoopParser(Parser):
    """The L1 parser with statements, blocks and declarations of L2."""

    def __init__(self, text: str, filename: str = "<input>"):
        super().__init__(text, filename)
        self._tokens = _tokens_with_braces(text, self.source)
        self.block_depth = 0

    # -- helpers ------------------------------------------------------------
    def note(self, node: object, tok: Token) -> None:
        """Remember where a statement or buffer starts (the first occurrence wins)."""
        self.source.record(node, tok.loc)

    def end_of_line(self) -> None:
        if not self.at_end_of_statement():
            raise self.unexpected("end of line")

    def skip_newlines(self) -> None:
        while self.peek().kind == "NEWLINE":
            self.advance()

    def word(self, value: str) -> Token:
        tok = self.peek()
        if not tok.is_word(value):
            raise self.unexpected(f"'{value}'", tok)
        return self.advance()

    # -- the file -------------------------------------------------------------
    def loop_program(self) -> LoopProgram:
        sizes: list[str] = []
        buffers: list[Buffer] = []
        kernels: list[Kernel] = []
        while True:
            self.skip_newlines()
            tok = self.peek()
            if tok.kind == "EOF":
                break
            if tok.is_word("sizes"):
                self.advance()
                sizes.append(self.name("a size name").value)
                while self.peek().is_op(","):
                    self.advance()
                    sizes.append(self.name("a size name").value)
            elif tok.is_word("index") and self.peek(1).kind == "NAME":  # index buffers: ir/index_parser.py
                self.advance()
                while True:
                    ntok, decl = self.index_declaration({b.name for b in buffers})
                    buffers.append(Buffer(decl.name, decl.extents, "input", decl.bound, decl.derived))
                    self.note(buffers[-1], ntok)
                    if not self.peek().is_op(","):
                        break
                    self.advance()
            elif tok.is_word(*ROLES):
                self.advance()
                buffers.append(self.buffer(tok.value))
                while self.peek().is_op(","):
                    self.advance()
                    buffers.append(self.buffer(tok.value))
            elif tok.is_word("kernel"):
                self.advance()
                name = self.name("a kernel name").value
                kernel = Kernel(name, self.block(f"kernel '{name}'"))
                self.note(kernel, tok)
                kernels.append(kernel)
            else:
                raise self.unexpected("'sizes', a buffer declaration or 'kernel'", tok)
            self.end_of_line()
        return LoopProgram(tuple(sizes), tuple(buffers), tuple(kernels), source=self.source)

    def buffer(self, role: str) -> Buffer:
        ntok = self.name("a buffer name")
        shape: tuple[Affine, ...] = ()
        if self.peek().is_op("["):
            shape = self.index_list()
        buf = Buffer(ntok.value, shape, role)  # type: ignore[arg-type]
        self.value_names.add(ntok.value)
        self.size_names.update(n for e in shape for n in e.names())  # a size written alone is its value
        self.note(buf, ntok)
        return buf

    # -- statements -------------------------------------------------------------
    def block(self, what: str) -> tuple[Stmt, ...]:
        """``'{' NEWLINE stmt* '}'``; the caller checks what follows the ``}``."""
        open_tok = self.expect("{")
        if self.peek().kind == "EOF":
            raise self.error(f"'{{' of {what} is never closed", open_tok)
        self.end_of_line()
        self.block_depth += 1
        if self.block_depth > MAX_DEPTH:
            raise self.error("statements are nested too deeply", open_tok)
        body: list[Stmt] = []
        while True:
            self.skip_newlines()
            tok = self.peek()
            if tok.kind == "EOF":
                raise self.error(f"'{{' of {what} is never closed", open_tok)
            if tok.is_op("}"):
                self.advance()
                break
            body.append(self.stmt())
            self.end_of_line()
        self.block_depth -= 1
        return tuple(body)

    def stmt(self) -> Stmt:
        tok = self.peek()
        nxt = self.peek(1)
        if tok.is_word("parallel") and nxt.is_word("for") and self.peek(2).kind == "NAME":
            self.advance()
            s: Stmt = self.for_loop(True)
        elif tok.is_word("for") and nxt.kind == "NAME":
            s = self.for_loop(False)
        elif tok.is_word("let") and nxt.kind == "NAME":
            self.advance()
            name = self.name("a scalar name").value
            self.expect("=")
            s = Let(name, self.expr())
            self.value_names.add(name)
        elif tok.is_word("local"):
            self.advance()
            name = self.name("a scalar name").value
            self.expect("=")
            s = Local(name, self.expr())
            self.value_names.add(name)
        elif tok.is_word("if") and not (nxt.is_op("[", "=") or self.accumulate_op(1)):
            s = self.if_stmt()
        elif tok.is_word("extern") and nxt.is_word(*MATRIX_ARITY):
            s = self.extern()
        elif tok.kind == "NAME":
            s = self.assignment()
        else:
            raise self.unexpected("a statement or '}'", tok)
        self.note(s, tok)
        return s

    def for_loop(self, parallel: bool) -> For:
        self.word("for")
        var = self.name("a loop variable").value
        self.word("in")
        lo = self.bound("max")
        self.expect("..")
        hi = self.bound("min")
        self.scope.append(var)  # the loop variable written alone in a value is its value
        try:
            body = self.block(f"loop '{var}'")
        finally:
            self.scope.pop()
        return For(var, lo, hi, body, parallel)

    def if_stmt(self) -> If:
        self.advance()  # 'if'
        cond = self.cond()
        then = self.block("if")
        orelse: tuple[Stmt, ...] = ()
        if self.peek().is_word("else"):
            self.advance()
            orelse = self.block("else")
        return If(cond, then, orelse)

    def extern(self) -> Extern:
        """``extern inv(A) -> B``, ``extern matmul(A, transpose(B)) -> C`` (the lexer has no ``->``:
        ``-`` directly followed by ``>``)."""
        self.advance()  # 'extern'
        fn = self.advance().value
        if fn == CONTRACT:  # extern contract(A[z, a], B[z, b]) -> C[a, b]
            return self.extern_contract()
        self.expect("(")
        args: list[str] = []
        flags: list[bool] = []
        while True:
            flags.append(self.peek().is_word("transpose") and self.peek(1).is_op("("))
            if flags[-1]:
                self.advance()
                self.expect("(")
            args.append(self.name("a buffer name").value)
            if flags[-1]:
                self.expect(")")
            if not self.peek().is_op(","):
                break
            self.advance()
        self.expect(")")
        self.arrow()
        out = self.name("a buffer name").value
        return Extern(fn, out, tuple(args), tuple(flags))

    def extern_contract(self) -> Extern:
        """The rest of ``extern contract(A[z, a], B[z, b]) -> C[a, b]``."""
        args, spec = parse_contract_args(self)
        self.arrow()
        out = self.name("a buffer name").value
        return Extern(CONTRACT, out, tuple(args), (), tuple(spec) + (tuple(parse_index_names(self)),))

    def arrow(self) -> None:
        """``->`` (the lexer has none: ``-`` directly followed by ``>``)."""
        minus, gt = self.peek(), self.peek(1)
        if not (minus.is_op("-") and gt.is_op(">") and gt.pos == minus.end):
            raise self.unexpected("'->'")
        self.advance()
        self.advance()

    def accumulate_op(self, k: int = 0) -> bool:
        """``+`` directly followed by ``=`` at lookahead ``k`` (the lexer has no ``+=``)."""
        plus, eq = self.peek(k), self.peek(k + 1)
        return plus.is_op("+") and eq.is_op("=") and eq.pos == plus.end

    def assignment(self) -> Stmt:
        ntok = self.name("a buffer or scalar name")
        indices: tuple[Affine, ...] = ()
        if self.peek().is_op("["):
            indices = self.index_list()
        if self.peek().is_op("="):
            self.advance()
            value: Expr = self.expr()
            return Store(ntok.value, indices, value)
        if self.accumulate_op():
            self.advance()
            self.advance()
            return Accumulate(ntok.value, indices, self.expr())
        raise self.unexpected("'=' or '+='")


def parse_loop_program(text: str, filename: str = "<string>") -> LoopProgram:
    """Parse the printed form of an L2 program; raises :class:`TccError` on a syntax error."""
    parser = LoopParser(text, filename)
    try:
        return parser.loop_program()
    except RecursionError:
        tok = parser.toks[min(parser.i, len(parser.toks) - 1)] if parser.toks else None
        raise TccError(
            "statements are nested too deeply", tok.loc if tok is not None else Loc(1, 1), parser.source
        ) from None
