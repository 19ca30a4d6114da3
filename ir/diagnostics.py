"""User-facing errors: ``FILE:LINE:COL: error: message``, the line and a caret.

This module is the bottom of the import graph (it imports nothing of tcc):
the lexer, the parsers, the verifiers and every pass raise these errors, and
the driver renders them.

Every mistake in a user's program or command line is a :class:`TccError`; the
driver prints it and exits 1.  Anything else escaping is a compiler bug.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Loc:
    line: int
    col: int


@dataclass(frozen=True)
class SourceMap:
    """Where things came from: the file name and text, plus node -> first location.

    Expressions are hash-consed, so two identical accesses in one definition
    (``sum[i: 0..4](x[i]) + sum[i: 0..5](x[i])``) are one node; ``every``
    keeps all of a node's locations, in source order, so that an error about
    one occurrence can point at it (:meth:`loc_within`).
    """

    filename: str
    text: str
    nodes: dict = field(default_factory=dict, compare=False, hash=False)
    every: dict = field(default_factory=dict, compare=False, hash=False)

    def loc_of(self, node: object) -> Loc | None:
        return self.nodes.get(node)

    def record(self, node: object, loc: Loc) -> None:
        self.nodes.setdefault(node, loc)
        self.every.setdefault(node, []).append(loc)

    def loc_within(self, node: object, scope: object) -> Loc | None:
        """The first location of ``node`` at or after where ``scope`` (an enclosing node) starts, else its first."""
        start = self.nodes.get(scope)
        if start is not None:
            for loc in sorted(self.every.get(node, ()), key=lambda l: (l.line, l.col)):
                if (loc.line, loc.col) >= (start.line, start.col):
                    return loc
        return self.nodes.get(node)


class TccError(Exception):
    def __init__(self, message: str, loc: Loc | None = None, source: SourceMap | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.source = source

    def located(self, loc: Loc | None, source: SourceMap | None) -> "TccError":
        """Attach a location if the error has none yet."""
        if self.loc is None and loc is not None:
            self.loc = loc
        if self.source is None:
            self.source = source
        return self

    def render(self) -> str:
        src = self.source
        if self.loc is None or src is None:
            prefix = f"{src.filename}: " if src is not None else ""
            return f"{prefix}error: {self.message}"
        lines = src.text.splitlines()
        line = lines[self.loc.line - 1] if 0 < self.loc.line <= len(lines) else ""
        # Columns count characters, a tab as one: the caret line repeats the
        # prefix's tabs so that it lines up under the tab stops the terminal uses.
        prefix = line[: self.loc.col - 1]
        caret = "".join(ch if ch == "\t" else " " for ch in prefix) + " " * (self.loc.col - 1 - len(prefix)) + "^"
        return f"{src.filename}:{self.loc.line}:{self.loc.col}: error: {self.message}\n{line}\n{caret}"

    def __str__(self) -> str:
        return self.render()
