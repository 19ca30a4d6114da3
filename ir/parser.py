"""Recursive-descent parser of the tcc language (the inverse of :mod:`tcc.ir.printer`).

    stmt       := 'input' decl (',' decl)* | 'output' decl (',' decl)* | 'local' decl (',' decl)*
                | 'assume' cond | NAME ('[' NAME (',' NAME)* ']')? '=' expr
    decl       := NAME ('[' index (',' index)* ']')?
    expr       := term (('+'|'-') term)*
    term       := unary (('*'|'/') unary)*
    unary      := '-' unary | power          # '-' NUMBER (not followed by '**') is a negative Const
    power      := primary ('**' unary)?
    primary    := NUMBER | NAME | NAME '[' index, ... ']' | FUNC '(' expr ')'
                | 'sum' '[' sumhead ']' '(' expr ')' | 'where' '(' cond ',' expr ',' expr ')' | '(' expr ')'
    sumhead    := var (':' bound '..' bound)? (',' ...)*  |  NAME (',' NAME)* '|' cond (',' cond)*
    index      := iterm (('+'|'-') iterm)*
    iterm      := '-' iterm | ifactor ('*' ifactor | '//' ifactor | '%' ifactor)*
    ifactor    := INT | NAME | '(' index ')' | '-' ifactor
    cond       := cand ('or' cand)* ; cand := cnot ('and' cnot)*     (tcc.ir.cond_parser)
    cnot       := 'not' cnot | '(' cond ')' | index CMP index

A leading ``-`` of an index term negates the whole term (``-(i + 1) // 2`` is
``-((i + 1) // 2)``): that is how the printer writes an affine expression whose
first term is a negated ``//`` or ``%`` atom.

Only syntactic and local checks are made here; undeclared tensors, arities and
unbound index names are the verifier's business.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from .contraction import CONTRACT, parse_contract_args, parse_index_names
from .diagnostics import Loc, SourceMap, TccError
from .einstein import TensorExprParser, starts_tensor_expression
from .expr import (
    EXTREMES, GRAM, INDEX_VALUE, MATMUL, MATRIX_ARITY, MATRIX_FUNCTIONS, UNARY_FUNCTIONS, Access, Binary, Const,
    CSum, Expr, MatrixFn, Reduce, Sum, Unary, Where, bound_vars, format_matrix_call, free_names, postorder,
)
from .cond_parser import ConditionParser, select
from .user_functions import FunctionDefinitions
from .index_parser import IndexDeclarations
from .index import Affine, And, Cond
from .lexer import KEYWORDS, LiteralError, Token, index_constant_problem, tokenize
from .program import Assumption, Definition, Program, TensorDecl, assumption_error
from .lippmann import LippmannProblem, is_lippmann, read_lippmann

__all__ = ["parse_source", "parse_program", "parse_expr", "parse_index", "parse_cond", "Parser"]

MAX_DEPTH = 100  # nesting levels; deeper input is reported instead of overflowing the stack

_FUNCTIONS = frozenset(UNARY_FUNCTIONS)
_DECL_WORDS = ("input", "output", "local")


@dataclass
class _Statements:
    """What :meth:`Parser.program` has read so far; names map in file order."""

    inputs: list[TensorDecl] = field(default_factory=list)
    declared: dict[str, Token] = field(default_factory=dict)  # every declared name (input, output, local)
    fixed: list[tuple[str, str, Token, tuple[Affine, ...] | None]] = field(default_factory=list)  # output/local
    defs: dict[str, tuple[Token, tuple[str, ...], Expr]] = field(default_factory=dict)
    shapes: dict[str, tuple[Affine, ...] | None] = field(default_factory=dict)  # extents known while parsing
    whole: set[str] = field(default_factory=set)  # definitions written as whole-tensor expressions
    assumptions: list[tuple[Cond, Token]] = field(default_factory=list)  # `assume cond` lines


class Parser(ConditionParser, FunctionDefinitions, IndexDeclarations):
    def __init__(self, text: str, filename: str = "<input>"):
        self.text = text
        self.source = SourceMap(filename, text, {})
        self._tokens: Iterator[Token] = tokenize(text, self.source)
        self.toks: list[Token] = []
        self.i = 0
        self.depth = 0
        self.scope: list[str] = []  # left-hand side indices and enclosing sum variables
        self.size_names: set[str] = set()  # sizes of the inputs declared so far: values where written alone
        self.index_arrays: dict[str, tuple] = {}  # `index` inputs so far: (largest entry, decl, bound token)
        self.functions: dict[str, tuple[tuple[str, ...], Expr]] = {}  # `def` lines: parameters, body
        self.defining: str | None = None  # the function whose body is being read
        self.value_names: set[str] = set()  # tensors (and L2 scalars) so far: `s > 0` with them compares values
        self.prev_end = 0
        self._lex_error: TccError | None = None

    # -- token access ----------------------------------------------------
    def peek(self, k: int = 0) -> Token:
        j = self.i + k
        while len(self.toks) <= j:
            if self.toks and self.toks[-1].kind == "EOF":
                return self.toks[-1]
            if self._lex_error is not None:  # the tokenizer stopped; backtracking may ask again
                raise self._lex_error
            try:
                self.toks.append(next(self._tokens))
            except TccError as e:
                self._lex_error = e
                raise
        return self.toks[j]

    def advance(self) -> Token:
        tok = self.peek()
        if tok.kind != "EOF":
            self.i += 1
        self.prev_end = tok.end
        return tok

    def error(self, message: str, tok: Token | Loc) -> TccError:
        loc = tok if isinstance(tok, Loc) else tok.loc
        return TccError(message, loc, self.source)

    def unexpected(self, what: str, tok: Token | None = None) -> TccError:
        tok = tok or self.peek()
        if tok.kind == "EOF":
            return self.error("unexpected end of input", tok)
        return self.error(f"expected {what} but found {tok.describe()}", tok)

    def expect(self, op: str) -> Token:
        tok = self.peek()
        if not tok.is_op(op):
            raise self.unexpected(f"'{op}'", tok)
        return self.advance()

    def name(self, what: str = "a name") -> Token:
        tok = self.peek()
        if tok.kind != "NAME":
            raise self.unexpected(what, tok)
        if tok.value in KEYWORDS:
            raise self.error(f"'{tok.value}' is a reserved word", tok)
        return self.advance()

    def at_end_of_statement(self) -> bool:
        return self.peek().kind in ("NEWLINE", "EOF")

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error("expression is nested too deeply", self.peek())

    def record(self, node: Expr, tok: Token) -> None:
        self.source.record(node, tok.loc)

    # -- programs ---------------------------------------------------------
    def program(self) -> Program:
        st = _Statements()
        while True:
            while self.peek().kind == "NEWLINE":
                self.advance()
            tok = self.peek()
            if tok.kind == "EOF":
                break
            if tok.is_word(*_DECL_WORDS):
                self.advance()
                self.declarations(st, tok.value)
            elif tok.is_word("index") and self.peek(1).kind == "NAME":  # `index tok[n] < v`
                self.index_declarations(st, self.advance())
            elif self.starts_function_definition():
                self.function_definition()
            elif tok.is_word("assume") and not self.peek(1).is_op("=", "["):  # `assume = ...` defines a tensor
                self.advance()
                st.assumptions.append((self.cond(), tok))
            elif tok.kind == "NAME":
                self.definition(st)
            else:
                raise self.unexpected("a declaration or definition", tok)
            if not self.at_end_of_statement():
                raise self.unexpected("end of line")
        return self.assemble(st)

    def declarations(self, st: _Statements, kind: str) -> None:
        """The names after ``input``, ``output`` or ``local`` (the ``kind``)."""
        while True:
            ntok = self.name("a tensor name")
            if ntok.value in st.declared:
                raise self.error(f"'{ntok.value}' is already declared", ntok)
            if kind == "input" and ntok.value in st.defs:
                raise self.error(f"'{ntok.value}' is already defined", ntok)
            extents: tuple[Affine, ...] | None = None
            if self.peek().is_op("["):
                extents = self.index_list()
            st.declared[ntok.value] = ntok
            self.value_names.add(ntok.value)
            if kind == "input":
                self.size_names.update(n for e in extents or () for n in e.names())
                st.inputs.append(TensorDecl(ntok.value, extents or (), ntok.loc))
                st.shapes[ntok.value] = extents or ()
            else:
                st.fixed.append((kind, ntok.value, ntok, extents))
                if extents is not None and ntok.value not in st.shapes:
                    st.shapes[ntok.value] = extents  # whole-tensor expressions may read it
            if not self.peek().is_op(","):
                break
            self.advance()

    def definition(self, st: _Statements) -> None:
        """``NAME[indices] = ...``: element-wise, a whole-tensor expression or a matrix function."""
        ntok = self.name("a declaration or definition")
        if ntok.value in st.defs:
            raise self.error(f"'{ntok.value}' is already defined", ntok)
        if any(d.name == ntok.value for d in st.inputs):
            raise self.error(f"cannot redefine input '{ntok.value}'", ntok)
        indices: list[str] = []
        if self.peek().is_op("["):
            self.advance()
            while True:
                itok = self.name("an index name")
                if itok.value in indices:
                    raise self.error(f"index '{itok.value}' appears twice on the left-hand side", itok)
                indices.append(itok.value)
                if self.peek().is_op(","):
                    self.advance()
                    continue
                self.expect("]")
                break
        self.expect("=")
        self.scope = list(indices)
        orders = {d.name: len(d.extents) for d in st.inputs} | {n: len(v[1]) for n, v in st.defs.items()}
        if not indices and starts_tensor_expression(self, orders):
            taken = (set(st.declared) | set(st.defs) | self.defined_names
                     | {n for d in st.inputs for e in d.extents for n in e.names()})
            tp = TensorExprParser(self, orders, st.shapes, taken)
            outlined, d = tp.definition(ntok.value, ntok)
            for o in outlined + [d]:
                st.defs[o.name] = (ntok, o.indices, o.body)
                st.shapes[o.name] = o.extents
                st.whole.add(o.name)
        elif self.peek().is_word(*MATRIX_ARITY) and self.peek(1).is_op("("):
            st.defs[ntok.value] = (ntok, tuple(indices), self.matrix_definition(ntok, indices))
        else:
            st.defs[ntok.value] = (ntok, tuple(indices), self.expr())
        self.scope = []
        self.value_names.add(ntok.value)

    def assemble(self, st: _Statements) -> Program:
        """The program once every line is read: each declared output or local
        is defined, and its extents are the declared or the inferred ones."""
        extents_of: dict[str, tuple[Affine, ...] | None] = {}
        for kind, name, ntok, ext in st.fixed:
            if name not in st.defs:
                raise self.error(f"{kind} '{name}' has no definition", ntok)
            if name in st.whole:
                unified = st.shapes.get(name)
                if ext is not None and unified is not None and tuple(ext) != tuple(unified):
                    have = ", ".join(str(e) for e in unified)
                    raise self.error(
                        f"{kind} '{name}' is declared with extents [{', '.join(str(e) for e in ext)}] "
                        f"but its expression gives [{have}]",
                        ntok,
                    )
                ext = unified if ext is None else ext
            if ext is None and not st.defs[name][1]:
                ext = ()  # `output g` for a scalar definition g
            extents_of[name] = ext
        sizes = {n for d in st.inputs for e in d.extents for n in e.names()}
        definitions = tuple(
            Definition(
                name,
                indices,
                body if name in st.whole else self.implicit_sums(ntok, body, indices, sizes),
                extents_of[name] if name in extents_of else (st.shapes.get(name) if name in st.whole else None),
                ntok.loc,
            )
            for name, (ntok, indices, body) in st.defs.items()
        )
        outputs = tuple(name for kind, name, _, _ in st.fixed if kind == "output")
        self.check_index_bounds(st, sizes)
        for cond, tok in st.assumptions:
            if (problem := assumption_error(cond, sizes)) is not None:
                raise self.error(problem, tok)
        assumptions = tuple(Assumption(cond, tok.loc) for cond, tok in st.assumptions)
        return Program(tuple(st.inputs), definitions, outputs, source=self.source, assumptions=assumptions)

    @functools.cached_property
    def defined_names(self) -> frozenset[str]:
        """Names the file defines anywhere (``NAME =`` or ``NAME[...] =`` at a line start).

        Temporaries a whole-tensor definition outlines must not take a name
        that a later line defines.  Read once per parse.
        """
        return frozenset(
            re.findall(r"^[ \t]*([A-Za-z_][A-Za-z_0-9]*)[ \t]*(?:\[[^\]\n]*\])?[ \t]*=(?!=)", self.text, re.M)
        )

    def implicit_sums(self, ntok: Token, body: Expr, indices: Iterable[str], sizes: set[str]) -> Expr:
        """Tensor Comprehensions' rule: an index only on the right is summed over the whole right-hand side.

        ``y[i] = A[i, j] * x[j]`` is ``y[i] = sum[j](A[i, j] * x[j])``; the sums
        nest in order of first appearance and their ranges are inferred.
        """
        bound = set(indices) | sizes
        free = [n for n in free_names(body) if n not in bound]
        if free:
            inner = {v for node in postorder(body) for v in bound_vars(node)}
            for n in free:
                if n in inner:
                    raise self.error(
                        f"index '{n}' of '{ntok.value}' is summed implicitly (it is not on the left-hand side) "
                        f"and also names a sum inside it: rename one of them",
                        ntok,
                    )
        for n in reversed(free):
            body = Sum(n, (), (), body)
        return body

    def matrix_definition(self, ntok: Token, indices: list[str]) -> Expr:
        """``B[i, j] = inv(A)[i, j]``, ``s = det(A)`` or ``C[i, j] = matmul(A, B)[i, j]``:
        the whole body, indices as on the left."""
        ftok = self.advance()
        fn, atok = ftok.value, self.peek(1)
        args, flags, spec = [], [], []  # type: list[str], list[bool], list[tuple[str, ...]]
        if fn == CONTRACT:  # contract(A[z, a], B[z, b]): ir/contraction.py
            args, spec = parse_contract_args(self)
            flags = [False] * len(args)
        else:
            self.expect("(")
        while fn != CONTRACT:
            flags.append(fn == MATMUL and self.peek().is_word("transpose") and self.peek(1).is_op("("))
            if flags[-1]:  # matmul(A, transpose(B)): B read transposed
                self.advance()
                self.expect("(")
            args.append(self.name("a matrix name").value)
            if flags[-1]:
                self.expect(")")
            if not self.peek().is_op(","):
                self.expect(")")
                break
            self.advance()
        ctok = self.toks[self.i - 1]
        spec = spec and spec + [tuple(indices)]
        call = format_matrix_call(fn, tuple(args), tuple(flags), spec)
        if len(args) != MATRIX_ARITY[fn]:
            want = {MATMUL: "two matrices: matmul(A, B)", GRAM: "a matrix and a vector: gram(X, w)"}.get(fn, f"one matrix: {fn}(A)")
            raise self.error(f"{fn} takes {want} (here: {call})", ctok)
        node = MatrixFn(fn, *args, transposed=tuple(flags), spec=spec)
        self.record(node, atok)
        given = parse_index_names(self) if self.peek().is_op("[") else []
        order = node.order
        # C[b, i, j] = matmul(A, B)[b, i, j]: a batch of products has more indices
        if (len(indices) != order and not (fn == MATMUL and len(indices) > 2)) or given != indices:
            lhs = f"{ntok.value}[{', '.join(indices)}]" if indices else ntok.value
            want = f"{ntok.value}[i, j] = {call}[i, j]" if order else f"{ntok.value} = {call}"
            raise self.error(
                f"{fn} gives a {'matrix' if order else 'scalar'}; its definition is written '{want}' "
                f"(here: '{lhs}' with indices [{', '.join(given)}])",
                ftok,
            )
        if not self.at_end_of_statement():
            what = "a matrix product" if fn == MATMUL else "a matrix function"
            raise self.error(
                f"{what} is a definition of its own: define '{ntok.value}' as {call} "
                f"alone and use '{ntok.value}' in other definitions",
                self.peek(),
            )
        return node

    def index_list(self, open_: str = "[", close: str = "]") -> tuple[Affine, ...]:
        self.expect(open_)
        items = [self.index()]
        while self.peek().is_op(","):
            self.advance()
            items.append(self.index())
        self.expect(close)
        return tuple(items)

    # -- scalar expressions -------------------------------------------------
    def expr(self) -> Expr:
        lhs = self.term()
        while self.peek().is_op("+", "-"):
            op = self.advance().value
            lhs = self.index_fold(Binary(op, lhs, self.term()))
        return lhs

    def term(self) -> Expr:
        lhs = self.unary()
        while self.peek().is_op("*", "/", "//", "%"):  # `k // 2` in a value: IndexDeclarations.index_division
            op = self.advance()
            lhs = self.index_division(lhs, op) if op.value in ("//", "%") else self.index_fold(Binary(op.value, lhs, self.unary()))
        return lhs

    def unary(self) -> Expr:
        self.enter()
        try:
            tok = self.peek()
            if tok.is_op("-"):
                num = self.peek(1)
                if num.kind in ("INT", "FLOAT") and not self.peek(2).is_op("**"):
                    self.advance()
                    self.advance()
                    return Const(-self.number(num))
                self.advance()
                return self.index_fold(Unary("neg", self.unary()))
            base = self.primary()
            if self.peek().is_op("^"):
                raise self.error("'^' is a power only in whole-tensor expressions: write '**'", self.peek())
            if self.peek().is_op("**"):
                self.advance()
                return Binary("**", base, self.unary())
            return base
        finally:
            self.depth -= 1

    def number(self, tok: Token) -> int | float:
        return int(tok.value) if tok.kind == "INT" else float(tok.value)

    def primary(self) -> Expr:
        tok = self.peek()
        if tok.kind in ("INT", "FLOAT"):
            self.advance()
            return Const(self.number(tok))
        if tok.is_op("("):
            self.advance()
            e = self.expr()
            self.expect(")")
            return e
        if tok.kind != "NAME":
            raise self.unexpected("an expression", tok)
        word = tok.value
        if word == "sum" or (word in EXTREMES and self.peek(1).is_op("[")):  # max[k](...) reduces
            return self.sum_expr()
        if word == "where":
            self.advance()
            self.expect("(")
            cond = self.where_condition()
            self.expect(",")
            then = self.expr()
            self.expect(",")
            other = self.expr()
            self.expect(")")
            return select(cond, then, other)
        if word in EXTREMES and self.peek(1).is_op("("):  # max(a, b, ...): folded left
            self.advance()
            self.expect("(")
            args = [self.expr()]
            while self.peek().is_op(","):
                self.advance()
                args.append(self.expr())
            self.expect(")")
            if len(args) < 2:
                raise self.error(f"{word}(...) of values takes two or more arguments; {word}[k](...) is a reduction", tok)
            node = args[0]
            for a in args[1:]:
                node = Binary(word, node, a)
            return node
        if word in MATRIX_ARITY and self.peek(1).is_op("("):
            if word in (MATMUL, GRAM):
                example = f"C[i, j] = {word}({'A, B' if word == MATMUL else 'X, w'})[i, j]"
            else:
                example = f"B[i, j] = {word}(A)[i, j]" if MATRIX_FUNCTIONS[word] else f"s = {word}(A)"
            raise self.error(f"{word} is not element-wise: give it a definition of its own ('{example}') and read that", tok)
        if word in _FUNCTIONS:
            self.advance()
            self.expect("(")
            arg = self.expr()
            self.expect(")")
            return Unary(word, arg)
        if word in self.functions and self.peek(1).is_op("("):
            return self.call(tok)
        self.name()  # reports reserved words
        if self.peek().is_op("("):
            if word == self.defining:
                raise self.error(f"'{word}' calls itself: user functions are inlined and cannot recurse", tok)
            known = ", ".join(UNARY_FUNCTIONS + tuple(self.functions))
            raise self.error(f"unknown function '{word}' (functions: {known})", tok)
        indices: tuple[Affine, ...] = ()
        if word in self.index_arrays and self.peek().is_op("["):
            return self.index_array_value(tok)
        if self.peek().is_op("["):
            indices = self.index_list()
        elif word in self.scope or word in self.size_names:  # an index or a size as a value: `x[i] * i / n`
            indices, word = (Affine.var(word),), INDEX_VALUE
        node = Access(word, indices)
        self.record(node, tok)
        return node

    def sum_var(self, seen: list[str]) -> Token:
        vtok = self.name("a sum index")
        if vtok.value in self.scope or vtok.value in seen:
            raise self.error(f"sum index '{vtok.value}' shadows an enclosing index", vtok)
        seen.append(vtok.value)
        return vtok

    def sum_expr(self) -> Expr:
        stok = self.advance()  # 'sum'
        self.expect("[")
        outer_scope = self.scope
        heads: list[tuple[Token, tuple[Affine, ...], tuple[Affine, ...]]] = []
        names: list[str] = []
        ranged = False
        constraints: list[Cond] | None = None
        try:
            self.scope = list(outer_scope)
            while True:
                vtok = self.sum_var(names)
                lo: tuple[Affine, ...] = ()
                hi: tuple[Affine, ...] = ()
                if self.peek().is_op(":"):
                    self.advance()
                    lo = self.bound("max")
                    self.expect("..")
                    hi = self.bound("min")
                    ranged = True
                heads.append((vtok, lo, hi))
                self.scope.append(vtok.value)
                if self.peek().is_op(","):
                    self.advance()
                    continue
                if self.peek().is_op("|") and not ranged:
                    self.advance()
                    constraints = []
                    if not self.peek().is_op("]"):
                        constraints.append(self.cond())
                        while self.peek().is_op(","):
                            self.advance()
                            constraints.append(self.cond())
                break
            self.expect("]")
            if not self.peek().is_op("("):
                raise self.error(f"{stok.value}[...] needs a body: {stok.value}[{names[0]}](...)", self.peek())
            self.expect("(")
            body = self.expr()
            self.expect(")")
        finally:
            self.scope = outer_scope
        if constraints is not None and stok.value != "sum":
            # max[p, q | c](b) is max[p, q](where(c, b, -inf)): ranges from the reads (then clipped by c)
            worst = Binary("/", Const(-1.0 if stok.value == "max" else 1.0), Const(0.0))
            if constraints:
                body = Where(constraints[0] if len(constraints) == 1 else And(tuple(constraints)), body, worst)
            heads = [(vtok, (), ()) for vtok, _, _ in heads]
        elif constraints is not None:
            node: Expr = CSum(tuple(names), tuple(constraints), body)
            self.record(node, stok)
            return node
        node = body
        for k in range(len(heads) - 1, -1, -1):
            vtok, lo, hi = heads[k]
            node = Sum(vtok.value, lo, hi, node) if stok.value == "sum" else Reduce(stok.value, vtok.value, lo, hi, node)
            self.record(node, stok if k == 0 else vtok)
        return node

    def bound(self, fn: str) -> tuple[Affine, ...]:
        tok = self.peek()
        if tok.is_word("max", "min"):
            if tok.value != fn:
                where = "a lower" if tok.value == "max" else "an upper"
                raise self.error(f"'{tok.value}(...)' is only allowed in {where} bound", tok)
            self.advance()
            return self.index_list("(", ")")
        return (self.index(),)

    # -- index expressions --------------------------------------------------
    def index(self) -> Affine:
        a = self.iterm()
        while self.peek().is_op("+", "-"):
            op = self.advance().value
            b = self.iterm()
            a = a + b if op == "+" else a - b
        return a

    def iterm(self) -> Affine:
        self.enter()
        try:
            if self.peek().is_op("-"):
                self.advance()
                return -self.iterm()
            start = self.peek()
            a = self.ifactor()
            while True:
                tok = self.peek()
                if tok.is_op("*"):
                    self.advance()
                    b = self.ifactor()
                    if a.is_constant:
                        a = b * a.const
                    elif b.is_constant:
                        a = a * b.const
                    else:
                        product = self.text[start.pos:self.prev_end]
                        raise self.error(f"index expression is not affine: {product}", start)
                elif tok.is_op("//", "%"):
                    self.advance()
                    dtok = self.peek()
                    d = self.ifactor()
                    if not d.is_constant or d.const <= 0:
                        raise self.error(f"the divisor of '{tok.value}' must be a positive integer constant", dtok)
                    a = a.floordiv(d.const) if tok.value == "//" else a.mod(d.const)
                else:
                    return a
        finally:
            self.depth -= 1

    def ifactor(self) -> Affine:
        self.enter()
        try:
            tok = self.peek()
            if tok.kind == "INT":
                self.advance()
                if (problem := index_constant_problem(tok.value)) is not None:
                    raise LiteralError(problem, tok.loc, self.source)
                return Affine.constant(int(tok.value))
            if tok.kind == "NAME":
                if self.peek(1).is_op("[", "("):  # an index array's read, or an error (x[0] in a sum bound)
                    return self.lookup(tok)
                return Affine.var(self.name().value)
            if tok.is_op("("):
                self.advance()
                a = self.index()
                self.expect(")")
                return a
            if tok.is_op("-"):
                self.advance()
                return -self.ifactor()
            raise self.unexpected("an index expression", tok)
        finally:
            self.depth -= 1

    # -- conditions -----------------------------------------------------------
    def finish(self) -> None:
        while self.peek().kind == "NEWLINE":
            self.advance()
        if self.peek().kind != "EOF":
            raise self.unexpected("end of input")


def _strip_bom(text: str) -> str:
    """Drop a leading UTF-8 byte-order mark (editors on Windows write one); columns count from after it."""
    return text[1:] if text.startswith("\ufeff") else text


def _run(text: str, filename: str, fn):  # noqa: ANN001, ANN202
    parser = Parser(_strip_bom(text), filename)
    try:
        return fn(parser)
    except RecursionError:
        tok = parser.toks[min(parser.i, len(parser.toks) - 1)] if parser.toks else None
        raise TccError(
            "expression is nested too deeply", tok.loc if tok is not None else Loc(1, 1), parser.source
        ) from None


def parse_source(text: str, filename: str = "<input>") -> Program | LippmannProblem:
    """Source text in either form: the one place that tells the tcc language from Lippmann's.

    Lippmann's ``declare ... derivative wrt x`` form (:mod:`tcc.ir.lippmann`)
    also says what to differentiate, so it comes back as a
    :class:`~tcc.ir.lippmann.LippmannProblem` (its program, ``of`` and
    ``wrt``); a program in the tcc language comes back as itself.
    """
    text = _strip_bom(text)
    if is_lippmann(text):
        return _run(text, filename, read_lippmann)
    return _run(text, filename, lambda p: p.program())


def parse_program(text: str, filename: str = "<input>") -> Program:
    """A program in the tcc language, or in Lippmann's ``declare ...`` form (:mod:`tcc.ir.lippmann`)."""
    source = parse_source(text, filename)
    return source.program if isinstance(source, LippmannProblem) else source


def _single(method: str, indices: Iterable[str]):  # noqa: ANN202
    def go(p: Parser):  # noqa: ANN202
        p.scope = list(indices)
        while p.peek().kind == "NEWLINE":
            p.advance()
        result = getattr(p, method)()
        p.scope = []
        p.finish()
        return result

    return go


def parse_expr(text: str, filename: str = "<input>", indices: Iterable[str] = ()) -> Expr:
    """Parse one scalar expression; ``indices`` are the enclosing (left-hand side) index names."""
    return _run(text, filename, _single("expr", indices))


def parse_index(text: str, filename: str = "<input>") -> Affine:
    """Parse one index expression."""
    return _run(text, filename, _single("index", ()))


def parse_cond(text: str, filename: str = "<input>") -> Cond:
    """Parse one index condition."""
    return _run(text, filename, _single("cond", ()))
