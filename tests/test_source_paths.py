"""One rule tells a path from program text, for tcc.parse and the framework integrations alike.

``tcc.torch.function``, ``tcc.jax.function`` and ``tcc.dask.compile`` once had their own rule
(a string ending in ``.tcc`` only): a ``pathlib.Path`` or a file named without the suffix was
taken as program text there while ``tcc.parse`` read it.
"""
from __future__ import annotations

from pathlib import Path

import tcc
from tcc.integrations.common import program_source

SOURCE = "input x[n]\ny[i] = 2 * x[i]\n"


def test_the_integrations_read_the_paths_tcc_parse_reads(tmp_path: Path) -> None:
    named = tmp_path / "scale.tcc"
    named.write_text(SOURCE)
    bare = tmp_path / "scale_program"  # an existing file without the suffix
    bare.write_text(SOURCE)
    for source in (named, str(named), bare, str(bare)):
        assert program_source(source) == SOURCE, source
        assert str(tcc.parse(source)) == str(tcc.parse(SOURCE))


def test_program_text_and_programs_pass_through() -> None:
    assert program_source(SOURCE) is SOURCE
    program = tcc.parse(SOURCE)
    assert program_source(program) is program
    assert program_source("-") == "-"  # stdin is the command line's, not a library function's

