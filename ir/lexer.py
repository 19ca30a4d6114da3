"""Tokenizer of the tcc language.

Tokens are produced lazily (so that a syntax error on line 2 is reported
before an unknown character on line 9).  A statement ends at a newline, except
inside ``(...)`` and ``[...]`` where newlines are ignored; ``#`` starts a
comment that runs to the end of the line.

Token kinds: ``NAME`` (identifiers, keywords included), ``INT``, ``FLOAT``,
``OP`` (punctuation and operators), ``NEWLINE`` and ``EOF``.
"""
from __future__ import annotations

from typing import Iterator

from .diagnostics import Loc, SourceMap, TccError
from .expr import MATRIX_ARITY, UNARY_FUNCTIONS

#: Words that can never be tensor, index or size names.
KEYWORDS = frozenset(
    ("input", "output", "local", "sum", "where", "max", "min", "and", "or", "not") + UNARY_FUNCTIONS
    + tuple(MATRIX_ARITY)
)

#: Operators, longest first so that ``**`` wins over ``*``.
OPERATORS = (
    "**", "//", "==", "!=", "<=", ">=", "..",
    "+", "-", "*", "/", "%", "<", ">", "=", "(", ")", "[", "]", ",", ":", "|", "^",
)
COMPARISON_OPS = frozenset(("==", "!=", "<", "<=", ">", ">="))

_OPEN = "(["
_CLOSE = ")]"
_SPACE = " \t\r"
_MAX_INT_DIGITS = 4000  # int() refuses longer literals on recent Pythons
_QUOTE_CHARS = 40  # a longer literal is quoted by its ends and its length


def quote_number(word: str) -> str:
    """``word`` quoted for an error message: a literal of 400 digits would
    fill the terminal, so a long one shows its first and last digits and its
    length."""
    if len(word) <= _QUOTE_CHARS:
        return f"'{word}'"
    return f"'{word[:16]}...{word[-8:]}' ({len(word)} characters)"


class LiteralError(TccError):
    """A literal that is wrong wherever it is read.

    The parser tries a ``where`` condition as an index comparison first and,
    where that fails, as a comparison of values; an index constant past int64
    would then be read silently as an inexact float.  Backtracking re-raises
    this error instead of trying another reading.
    """


#: The largest index constant: compiled code does its index arithmetic in int64.
INT64_MAX = (1 << 63) - 1


def index_constant_problem(word: str) -> str | None:
    """Why the integer literal ``word`` cannot be an index constant, or None.

    Index expressions are evaluated in 64-bit integers, so a constant past
    int64 would wrap around silently in the compiled code; it is refused where
    it is written.  (Smaller constants that could still overflow once sizes
    are added are refused by :func:`tcc.ir.index_range.check_index_range`.)
    """
    if int(word) <= INT64_MAX:
        return None
    return (f"index constant {quote_number(word)} is out of the 64-bit range (at most 2**63 - 1): "
            f"index arithmetic with it may overflow 64-bit integer arithmetic")


def _is_finite_float(kind: str, word: str) -> bool:
    """Whether the literal ``word`` has a finite float64 value.

    Every number of the language is one: a value is computed in float64 (an
    integer literal in an expression converts to it) and an index constant is
    an int64, a subset.  A float literal that overflows would be inf and an
    integer one would raise OverflowError wherever it is converted, so both
    are refused here, where the caret can point at them.
    """
    try:
        value = float(word) if kind == "FLOAT" else float(int(word))
    except OverflowError:
        return False
    return value not in (float("inf"), float("-inf"))


class Token:
    __slots__ = ("kind", "value", "line", "col", "pos", "end")

    def __init__(self, kind: str, value: str, line: int, col: int, pos: int, end: int):
        self.kind = kind
        self.value = value
        self.line = line
        self.col = col
        self.pos = pos  # offset of the first character
        self.end = end  # offset after the last character

    @property
    def loc(self) -> Loc:
        return Loc(self.line, self.col)

    def is_op(self, *values: str) -> bool:
        return self.kind == "OP" and self.value in values

    def is_word(self, *values: str) -> bool:
        return self.kind == "NAME" and self.value in values

    def describe(self) -> str:
        if self.kind == "EOF":
            return "end of input"
        if self.kind == "NEWLINE":
            return "end of line"
        return f"'{self.value}'"

    def __repr__(self) -> str:
        return f"Token({self.kind}, {self.value!r}, {self.line}:{self.col})"


def _is_name_start(ch: str) -> bool:
    return ch == "_" or ("a" <= ch <= "z") or ("A" <= ch <= "Z")


def _is_name_char(ch: str) -> bool:
    return _is_name_start(ch) or ("0" <= ch <= "9")


def _is_digit(ch: str) -> bool:
    return "0" <= ch <= "9"


def _scan_number(text: str, i: int) -> tuple[str, int, bool]:
    """The number literal starting at ``i``: its kind (``INT`` or ``FLOAT``), the
    offset after it, and whether it is malformed.  A malformed literal is read
    to its end (letters, digits, single dots) so the error quotes all of it."""
    n = len(text)
    kind = "INT"
    while i < n and _is_digit(text[i]):
        i += 1
    # '.' starts a fraction unless it is the range operator '..'
    if i < n and text[i] == "." and not (i + 1 < n and text[i + 1] == "."):
        kind = "FLOAT"
        i += 1
        while i < n and _is_digit(text[i]):
            i += 1
    malformed = False
    if i < n and text[i] in "eE":
        kind = "FLOAT"
        i += 1
        if i < n and text[i] in "+-":
            i += 1
        if i < n and _is_digit(text[i]):
            while i < n and _is_digit(text[i]):
                i += 1
        else:
            malformed = True
    # a number glued to letters, digits or a single '.' is malformed: 2x, 1.5.3, 1e
    while i < n and (_is_name_char(text[i]) or (text[i] == "." and not (i + 1 < n and text[i + 1] == "."))):
        malformed = True
        i += 1
    return kind, i, malformed


def tokenize(text: str, source: SourceMap | None = None) -> Iterator[Token]:
    """Yield the tokens of ``text``; the last one is ``EOF``.  Raises :class:`TccError`."""
    if source is None:
        source = SourceMap("<input>", text, {})
    n = len(text)
    i = 0
    line, line_start = 1, 0
    depth = 0
    comment = -1
    last_end: tuple[int, int, int] = (1, 1, 0)  # (line, col, offset) after the last real token

    def err(msg: str, pos: int) -> TccError:
        return TccError(msg, Loc(line, pos - line_start + 1), source)

    while i < n:
        ch = text[i]
        if ch in _SPACE:
            i += 1
            continue
        if ch == "#":
            comment = i  # an end of line is reported where its comment starts
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch == "\n":
            if depth == 0:
                at = comment if comment >= line_start else i
                yield Token("NEWLINE", "\n", line, at - line_start + 1, at, at)
            i += 1
            line, line_start = line + 1, i
            continue
        col = i - line_start + 1
        start = i
        if _is_name_start(ch):
            while i < n and _is_name_char(text[i]):
                i += 1
            yield Token("NAME", text[start:i], line, col, start, i)
        elif _is_digit(ch) or (ch == "." and i + 1 < n and _is_digit(text[i + 1])):
            kind, i, malformed = _scan_number(text, i)
            word = text[start:i]
            if malformed:
                raise err(f"malformed number '{word}'", start)
            if kind == "INT" and len(word) > _MAX_INT_DIGITS:
                raise err("integer literal is too long", start)
            if not _is_finite_float(kind, word):
                raise err(f"number out of range {quote_number(word)}", start)
            yield Token(kind, word, line, col, start, i)
        else:
            for op in OPERATORS:
                if text.startswith(op, i):
                    break
            else:
                raise err(f"unexpected character {ch!r}", i)
            i += len(op)
            if op in _OPEN:
                depth += 1
            elif op in _CLOSE and depth > 0:
                depth -= 1
            yield Token("OP", op, line, col, start, i)
        last_end = (line, i - line_start + 1, i)
    yield Token("EOF", "", last_end[0], last_end[1], last_end[2], last_end[2])
