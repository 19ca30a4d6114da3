"""Golden text tests in the style of LLVM's lit + FileCheck, for tcc.

A golden file (``tests/golden/**/*.tcc`` or ``*.loops``) is a program whose
``#`` comments say how to run tcc on it and what the output must contain::

    # RUN: tcc compile %s --passes infer-ranges,simplify --emit index
    # CHECK: output f[3, 4]
    # CHECK-NEXT: f[i, j] = exp(
    # CHECK-NOT: ** 1

Why our own ~300 lines and not the ``filecheck`` PyPI package: that package
only matches (it is a separate command reading stdin), so we would still need
the RUN-line runner and the in-process driver; its failure output is the
command-line tool's, not a pytest report; and its releases are sparse.  The
subset below is small enough to own: it is what tcc's tests need and its
failure message is designed for them.

RUN lines (one test each; a trailing ``\\`` continues a line):

    RUN: [not] TOOL ARGS... [2>&1] [| FileCheck %s [--check-prefix=P]]

``%s`` is the golden file's path.  ``TOOL`` is ``tcc`` (``tcc.cli.driver.main``,
in-process: no interpreter start per test) or ``tcc-loops FILE [--passes
SPEC]`` (parse an L2 ``.loops`` file, run L2 passes on it, print it: the
``opt`` of the loop level, which the command line does not offer).  The tool
must exit 0, or with ``not`` 1 (a user error; 2, an internal error, is never
expected).  Stdout is checked; ``2>&1`` appends stderr in write order (the
``--dump-before/--dump-after`` dumps go there).  Without a ``FileCheck``
part the prefix is ``CHECK``.

Directives, LLVM FileCheck semantics (``PREFIX`` is the run's prefix):

* ``PREFIX:`` the pattern occurs after the previous match;
* ``PREFIX-NEXT:`` ... on the line right after the previous match's line;
* ``PREFIX-SAME:`` ... on the previous match's line, after it;
* ``PREFIX-EMPTY:`` the line after the previous match's line is empty;
* ``PREFIX-NOT:`` the pattern does not occur between the previous match and
  the next positive match (or the end of the block);
* ``PREFIX-LABEL:`` matched first, in order; they cut the output into blocks
  and the directives between two labels match inside their block only.

A pattern is a substring; leading and trailing blanks are ignored and a run of
blanks matches any run of blanks.  ``{{regex}}`` embeds a Python regular
expression.  A misspelt directive (``CHECK-NXT:``) and a prefix without any
directive are errors, so a test cannot pass by checking nothing.
"""
from __future__ import annotations

import contextlib
import difflib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

KINDS = ("", "-NEXT", "-SAME", "-NOT", "-LABEL", "-EMPTY")
CONTEXT_LINES = 12  # output lines shown on each side of where matching stopped
WHOLE_OUTPUT_LINES = 60  # shorter outputs are shown whole


class GoldenError(Exception):
    """A golden file that is malformed (bad RUN line, misspelt directive)."""


class CheckFailure(AssertionError):
    """The output does not satisfy a directive; the message is the whole report."""


@dataclass(frozen=True)
class Directive:
    """One CHECK line: ``kind`` is the suffix ('' for plain CHECK), ``line`` its line in the golden file."""

    prefix: str
    kind: str
    pattern: str
    line: int

    def title(self) -> str:
        return f"{self.prefix}{self.kind}: {self.pattern}"


@dataclass(frozen=True)
class Run:
    """One RUN line: the tool's argv (``%s`` substituted later), how it must exit, what is checked."""

    line: int
    argv: tuple[str, ...]
    expect_failure: bool
    merge_stderr: bool
    prefix: str

    def command(self, path: Path) -> str:
        words = ["not"] if self.expect_failure else []
        words += [w.replace("%s", str(path)) for w in self.argv]
        return shlex.join(words) + (" 2>&1" if self.merge_stderr else "")


# ---------------------------------------------------------------------------
# reading a golden file
# ---------------------------------------------------------------------------

def _comment_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text after '#') of every comment line, continuation lines of RUN joined."""
    out: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            out.append((number, stripped[1:].strip()))
    return out


def parse_runs(text: str) -> list[Run]:
    """The RUN lines of a golden file, in order; a ``\\`` at the end continues on the next comment line."""
    runs: list[Run] = []
    pending: tuple[int, str] | None = None
    for number, body in _comment_lines(text):
        if pending is not None:
            body = pending[1] + " " + body
            number = pending[0]
            pending = None
        elif not body.startswith("RUN:"):
            continue
        else:
            body = body[len("RUN:"):].strip()
        if body.endswith("\\"):
            pending = (number, body[:-1].strip())
            continue
        runs.append(_parse_run(number, body))
    if pending is not None:
        raise GoldenError(f"line {pending[0]}: the RUN line ends in '\\' but no line continues it")
    return runs


def _parse_run(number: int, body: str) -> Run:
    words = shlex.split(body)
    where = f"line {number}: RUN: {body}"
    prefix = "CHECK"
    if "|" in words:
        bar = words.index("|")
        check, words = words[bar + 1:], words[:bar]
        if not check or check[0] != "FileCheck" or "%s" not in check[1:2]:
            raise GoldenError(f"{where}: after '|' write 'FileCheck %s [--check-prefix=P]'")
        options = check[2:]
        if len(options) == 2 and options[0] == "--check-prefix":
            options = [f"--check-prefix={options[1]}"]
        if len(options) > 1 or (options and not options[0].startswith("--check-prefix=")):
            raise GoldenError(f"{where}: FileCheck takes only --check-prefix=P here")
        if options:
            prefix = options[0].split("=", 1)[1]
            if not re.fullmatch(r"[A-Z][A-Z0-9_]*", prefix):
                raise GoldenError(f"{where}: a check prefix is upper case letters, digits and '_'")
    merge = bool(words) and words[-1] == "2>&1"
    if merge:
        words = words[:-1]
    expect_failure = bool(words) and words[0] == "not"
    if expect_failure:
        words = words[1:]
    if not words or words[0] not in TOOLS:
        raise GoldenError(f"{where}: the tool must be one of {', '.join(sorted(TOOLS))}")
    if "%s" not in words:
        raise GoldenError(f"{where}: the command does not read the golden file (no %s)")
    return Run(number, tuple(words), expect_failure, merge, prefix)


def parse_directives(text: str, prefix: str) -> list[Directive]:
    """Every ``PREFIX...:`` comment line; a ``PREFIX-WORD:`` with an unknown suffix is an error."""
    shape = re.compile(rf"^{re.escape(prefix)}(-[A-Z]+)?:(.*)$")
    directives: list[Directive] = []
    for number, body in _comment_lines(text):
        m = shape.match(body)
        if m is None:
            continue
        kind = m.group(1) or ""
        if kind not in KINDS:
            raise GoldenError(f"line {number}: unknown directive {prefix}{kind}: (known: "
                              + ", ".join(prefix + k for k in KINDS) + ")")
        pattern = m.group(2).strip()
        if not pattern and kind != "-EMPTY":
            raise GoldenError(f"line {number}: {prefix}{kind}: has an empty pattern")
        if pattern and kind == "-EMPTY":
            raise GoldenError(f"line {number}: {prefix}-EMPTY: takes no pattern")
        directives.append(Directive(prefix, kind, pattern, number))
    if not directives:
        raise GoldenError(f"no {prefix}: lines: a run must check something")
    if directives[0].kind in ("-NEXT", "-SAME", "-EMPTY"):
        raise GoldenError(f"line {directives[0].line}: {directives[0].title()} has no previous match to follow")
    return directives


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Literal text with ``{{regex}}`` parts; a run of blanks matches any run of blanks."""
    parts: list[str] = []
    for i, piece in enumerate(re.split(r"\{\{(.*?)\}\}", pattern)):
        if i % 2:
            parts.append(f"(?:{piece})")
        else:
            parts.append(r"[ \t]+".join(re.escape(word) for word in re.split(r"[ \t]+", piece)))
    try:
        return re.compile("".join(parts))
    except re.error as exc:
        raise GoldenError(f"bad {{{{regex}}}} in pattern {pattern!r}: {exc}") from None


# ---------------------------------------------------------------------------
# matching
# ---------------------------------------------------------------------------

class _Text:
    """The checked output with line lookups."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(self, pos: int) -> int:
        """1-based line number of character ``pos``."""
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def line_text(self, line: int) -> str:
        start = self.starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start:] if end < 0 else self.text[start:end]


@dataclass
class _Miss:
    """Why matching stopped: the directive, where the search started, a line to point at, what happened."""

    directive: Directive
    cursor: int
    found: int | None
    why: str


def match(output: str, directives: Sequence[Directive]) -> _Miss | None:
    """None when ``output`` satisfies ``directives``, else where and why matching stopped."""
    text = _Text(output)
    labels = [d for d in directives if d.kind == "-LABEL"]
    bounds: list[tuple[int, int]] = []  # (start, end) of each label's match
    cursor = 0
    for d in labels:
        m = compile_pattern(d.pattern).search(output, cursor)
        if m is None:
            return _Miss(d, cursor, None, "not found (labels are matched first, in order)")
        bounds.append((m.start(), m.end()))
        cursor = m.end()
    groups: list[list[Directive]] = [[]]
    for d in directives:
        if d.kind == "-LABEL":
            groups.append([])
        else:
            groups[-1].append(d)
    edges = [0] + [b for pair in bounds for b in pair] + [len(output)]
    for index, group in enumerate(groups):
        start, end = edges[2 * index], edges[2 * index + 1]
        previous = bounds[index - 1] if index else None
        miss = _match_block(text, group, start, end, previous)
        if miss is not None:
            return miss
    return None


def _match_block(text: _Text, group: Sequence[Directive], start: int, end: int,
                 previous: tuple[int, int] | None) -> _Miss | None:
    """Match the directives between two labels inside ``text[start:end]``."""
    cursor = start
    last = previous  # span of the previous positive match
    nots: list[Directive] = []
    for d in group:
        if d.kind == "-NOT":
            nots.append(d)
            continue
        if last is None:
            if d.kind in ("-NEXT", "-SAME", "-EMPTY"):
                return _Miss(d, cursor, None, "has no previous match to follow")
        if d.kind == "-EMPTY":
            line = text.line_of(last[0]) + 1  # type: ignore[index]
            if line > len(text.starts) or text.starts[line - 1] >= end or text.line_text(line).strip():
                found = text.starts[line - 1] if line <= len(text.starts) else None
                return _Miss(d, cursor, found, f"line {line} of the output is not empty")
            span = (text.starts[line - 1], text.starts[line - 1])
        else:
            m = compile_pattern(d.pattern).search(text.text, cursor, end)
            if m is None:
                return _Miss(d, cursor, None, "not found")
            span = (m.start(), m.end())
            miss = _placement(text, d, last, span, cursor)
            if miss is not None:
                return miss
        miss = _forbidden(text, nots, cursor, span[0])
        if miss is not None:
            return miss
        nots, cursor, last = [], span[1], span
    return _forbidden(text, nots, cursor, end)


def _placement(text: _Text, d: Directive, last: tuple[int, int] | None,
               span: tuple[int, int], cursor: int) -> _Miss | None:
    """CHECK-NEXT / CHECK-SAME: the match must be on the right line."""
    if last is None or d.kind not in ("-NEXT", "-SAME"):
        return None
    want = text.line_of(last[1]) + (1 if d.kind == "-NEXT" else 0)
    got = text.line_of(span[0])
    if got == want:
        return None
    where = "the line after" if d.kind == "-NEXT" else "the same line as"
    return _Miss(d, cursor, span[0], f"found on output line {got}, not on {where} the previous match "
                 f"(line {text.line_of(last[1])}): output line {want} must hold it")


def _forbidden(text: _Text, nots: Sequence[Directive], start: int, end: int) -> _Miss | None:
    """The first CHECK-NOT pattern that occurs in ``text[start:end]``."""
    for d in nots:
        m = compile_pattern(d.pattern).search(text.text, start, end)
        if m is not None:
            return _Miss(d, start, m.start(), f"found on output line {text.line_of(m.start())}, "
                         "where it must not be")
    return None


def _nearest(text: _Text, pattern: str, first: int, last: int) -> int | None:
    """The output line in first..last most like ``pattern`` (FileCheck's 'possible intended match')."""
    best, best_ratio = None, 0.6
    literal = re.sub(r"\{\{.*?\}\}", "", pattern)
    for line in range(first, min(last, first + 2000) + 1):
        ratio = difflib.SequenceMatcher(None, literal, text.line_text(line).strip()).ratio()
        if ratio > best_ratio:
            best, best_ratio = line, ratio
    return best


def explain(output: str, miss: _Miss, *, path: Path, command: str, stderr: str) -> str:
    """The failure report: the directive, the command, the output around where matching stopped."""
    text = _Text(output)
    d = miss.directive
    at = text.line_of(miss.cursor)
    marks = {at: ">>"}
    lines = [f"{path}:{d.line}: {d.title()}", f"  {d.prefix}{d.kind or ''} {miss.why}",
             f"  command: {command}", f"  matching had reached output line {at} (marked >>)"]
    if miss.found is not None:
        marks[text.line_of(miss.found)] = "!!"
        lines.append(f"  the line it is about is marked !!")
    elif d.kind != "-EMPTY":
        near = _nearest(text, d.pattern, at, len(text.starts))
        if near is not None:
            marks.setdefault(near, "??")
            lines.append(f"  the most similar line after it is output line {near} (marked ??)")
    lines.append("output:" if output else "output: (empty)")
    lines += _excerpt(text, marks, len(text.starts) if output else 0)
    if stderr:
        lines += ["stderr:"] + ["   " + s for s in stderr.splitlines()[-40:]]
    return "\n".join(lines)


def _excerpt(text: _Text, marks: dict[int, str], total: int) -> list[str]:
    """The whole output when short, else the lines around each mark with '...' for the gaps."""
    if total <= WHOLE_OUTPUT_LINES:
        shown = set(range(1, total + 1))
    else:
        shown = {line for mark in marks for line in range(mark - CONTEXT_LINES, mark + CONTEXT_LINES + 1)
                 if 1 <= line <= total}
    out: list[str] = []
    previous = 0
    for line in sorted(shown):
        if line > previous + 1:
            out.append(f"   ... {line - previous - 1} lines")
        out.append(f"{marks.get(line, '  ')} {line:4d} | {text.line_text(line)}")
        previous = line
    if total > previous:
        out.append(f"   ... {total - previous} lines")
    return out


# ---------------------------------------------------------------------------
# running a RUN line
# ---------------------------------------------------------------------------

def _tcc(argv: Sequence[str]) -> int:
    """The command line, in-process."""
    from tcc.cli.driver import main

    return main(list(argv))


def _tcc_loops(argv: Sequence[str]) -> int:
    """``tcc-loops FILE [--passes SPEC]``: parse an L2 file, run L2 passes on it, print the result."""
    import argparse
    import sys

    from tcc.ir.diagnostics import TccError
    from tcc.ir.loops import format_loop_program
    from tcc.ir.loops_parser import parse_loop_program
    from tcc.pass_base import Level
    from tcc.pipeline import parse_pipeline, run_pipeline

    parser = argparse.ArgumentParser(prog="tcc-loops")
    parser.add_argument("file")
    parser.add_argument("--passes", default="")
    args = parser.parse_args(list(argv))
    try:
        program = parse_loop_program(Path(args.file).read_text(), args.file)
        if args.passes:
            program = run_pipeline(program, parse_pipeline(args.passes), start=Level.LOOPS)
    except TccError as err:
        print(err.render(), file=sys.stderr)
        return 1
    sys.stdout.write(format_loop_program(program))
    return 0


TOOLS: dict[str, Callable[[Sequence[str]], int]] = {"tcc": _tcc, "tcc-loops": _tcc_loops}


def execute(run: Run, path: Path) -> tuple[int, str, str]:
    """Run the tool in-process: (exit status, checked text, stderr kept apart)."""
    argv = [w.replace("%s", str(path)) for w in run.argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out if run.merge_stderr else err):
        try:
            rc = TOOLS[argv[0]](argv[1:])
        except SystemExit as exc:  # argparse of tcc-loops
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, out.getvalue(), err.getvalue()


def check_run(path: Path, run: Run, text: str | None = None) -> None:
    """Run one RUN line of ``path`` and check its output; raises CheckFailure with the report."""
    text = path.read_text() if text is None else text
    directives = parse_directives(text, run.prefix)
    rc, output, stderr = execute(run, path)
    command = run.command(path)
    if (rc != 0) if not run.expect_failure else (rc in (0, 2)):
        want = "exit 1 (a user error; the RUN line says 'not')" if run.expect_failure else "exit 0"
        raise CheckFailure(f"{path}:{run.line}: RUN: {command}\n  exited {rc}, expected {want}\n"
                           "output:\n" + _indent(output) + ("\nstderr:\n" + _indent(stderr) if stderr else ""))
    miss = match(output, directives)
    if miss is not None:
        raise CheckFailure(explain(output, miss, path=path, command=command, stderr=stderr))


def _indent(text: str) -> str:
    return "\n".join("   " + line for line in text.splitlines()[-60:])
