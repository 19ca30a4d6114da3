"""The recorded-derivative tests run after every other test, whatever order the files are given in.

They check the corpus of derivatives the other tests produced (conftest.py
records it), so running before them would check a partial corpus.  The order
comes from the ``recorded_corpus`` marker, not from the file's name sorting last.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys

TESTS = pathlib.Path(__file__).resolve().parent


def test_recorded_corpus_tests_are_collected_last() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "test_recorded_derivatives.py", "test_examples.py"],
        cwd=TESTS, capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    ids = [line for line in out.splitlines() if "::" in line]
    recorded = [i for i, line in enumerate(ids) if line.split("::")[0].endswith("test_recorded_derivatives.py")]
    assert recorded and len(recorded) < len(ids)
    assert recorded == list(range(len(ids) - len(recorded), len(ids))), ids
