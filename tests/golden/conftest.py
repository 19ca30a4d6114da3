"""Collects the golden text tests: every ``*.tcc`` and ``*.loops`` file under tests/golden.

Each RUN line of a file is one test item (``file.tcc::CHECK``, or the RUN's
check prefix); the matching rules are in :mod:`golden_check`.  A golden file
without a RUN line, or with a malformed one, is a collection error, never a
file that silently tests nothing.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from golden_check import CheckFailure, GoldenError, check_run, parse_runs  # noqa: E402

SUFFIXES = {".tcc", ".loops"}


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix in SUFFIXES:
        return GoldenFile.from_parent(parent, path=file_path)
    return None


class GoldenFile(pytest.File):
    """One golden file: an item per RUN line."""

    def collect(self):  # noqa: ANN201 - pytest's signature
        try:
            runs = parse_runs(self.path.read_text())
        except GoldenError as exc:
            raise self.CollectError(f"{self.path}: {exc}") from None
        if not runs:
            raise self.CollectError(f"{self.path}: no '# RUN:' line")
        names: dict[str, int] = {}
        for run in runs:
            names[run.prefix] = names.get(run.prefix, 0) + 1
        for run in runs:
            name = run.prefix if names[run.prefix] == 1 else f"{run.prefix}@{run.line}"
            yield GoldenItem.from_parent(self, name=name, run=run)


class GoldenItem(pytest.Item):
    """One RUN line and the directives of its prefix."""

    def __init__(self, *, run, **kwargs) -> None:  # noqa: ANN001, ANN003 - pytest's signature
        super().__init__(**kwargs)
        self.run = run

    def runtest(self) -> None:
        try:
            check_run(self.path, self.run)
        except GoldenError as exc:
            raise CheckFailure(f"{self.path}: {exc}") from None

    def repr_failure(self, excinfo, style=None):  # noqa: ANN001, ANN201 - pytest's signature
        if isinstance(excinfo.value, CheckFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):  # noqa: ANN201 - pytest's signature
        return self.path, self.run.line - 1, f"{self.path.name} RUN line {self.run.line}"
