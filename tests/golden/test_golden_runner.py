"""The golden-test runner itself: each directive fails when it should, with the report designed for it."""
from __future__ import annotations

from pathlib import Path

import pytest

from golden_check import CheckFailure, GoldenError, check_run, match, parse_directives, parse_runs

OUTPUT = "input x[n]\noutput y[n]\ny[i] = exp(x[i])\n\nkernel y {\n  z = 1\n}\n"


def _miss(checks: str) -> str | None:
    miss = match(OUTPUT, parse_directives(checks, "CHECK"))
    return None if miss is None else miss.why


def _golden(tmp_path: Path, body: str) -> tuple[Path, str]:
    path = tmp_path / "case.tcc"
    path.write_text("# RUN: tcc compile %s\ninput x[n]\ny[i] = exp(x[i])\n" + body)
    return path, path.read_text()


def test_in_order_substrings_and_blanks_match() -> None:
    assert _miss("# CHECK: output y\n# CHECK: exp(x[i])\n# CHECK-EMPTY:\n# CHECK-NEXT:   kernel    y {") is None
    assert _miss("# CHECK: y[i] = {{[a-z]+}}(x[i])") is None


def test_check_out_of_order_fails() -> None:
    assert _miss("# CHECK: exp(x[i])\n# CHECK: output y") == "not found"


def test_check_next_must_be_on_the_next_line() -> None:
    assert _miss("# CHECK: input x\n# CHECK-NEXT: output y") is None
    why = _miss("# CHECK: input x\n# CHECK-NEXT: exp(")
    assert why is not None and why.startswith("found on output line 3, not on the line after")


def test_check_same_and_empty() -> None:
    assert _miss("# CHECK: y[i]\n# CHECK-SAME: exp") is None
    assert _miss("# CHECK: y[i]\n# CHECK-EMPTY:") is None
    assert _miss("# CHECK: output\n# CHECK-EMPTY:") == "line 3 of the output is not empty"
    assert (_miss("# CHECK: output\n# CHECK-SAME: exp") or "").startswith("found on output line 3, not on the same line")


def test_check_not_between_matches() -> None:
    assert _miss("# CHECK: input\n# CHECK-NOT: exp\n# CHECK: output") is None
    assert _miss("# CHECK: input\n# CHECK-NOT: exp\n# CHECK: kernel") == "found on output line 3, where it must not be"
    assert _miss("# CHECK: kernel\n# CHECK-NOT: exp") is None  # after the last match, to the end
    assert _miss("# CHECK: output\n# CHECK-NOT: z = 1") == "found on output line 6, where it must not be"


def test_check_label_confines_the_checks_to_its_block() -> None:
    assert _miss("# CHECK-LABEL: output\n# CHECK: exp\n# CHECK-LABEL: kernel\n# CHECK: z = 1") is None
    # 'input' is before the first label's block ... so after the label it is not found
    assert _miss("# CHECK-LABEL: output\n# CHECK: input\n# CHECK-LABEL: kernel") == "not found"
    assert _miss("# CHECK-LABEL: kernel\n# CHECK-LABEL: output").startswith("not found (labels")


def test_malformed_directives_are_errors() -> None:
    with pytest.raises(GoldenError, match="unknown directive CHECK-NXT:"):
        parse_directives("# CHECK: a\n# CHECK-NXT: b", "CHECK")
    with pytest.raises(GoldenError, match="no CHECK: lines"):
        parse_directives("# NOTE: nothing", "CHECK")
    with pytest.raises(GoldenError, match="has an empty pattern"):
        parse_directives("# CHECK:", "CHECK")
    with pytest.raises(GoldenError, match="the tool must be one of tcc, tcc-loops"):
        parse_runs("# RUN: python %s")
    with pytest.raises(GoldenError, match="does not read the golden file"):
        parse_runs("# RUN: tcc passes")


def test_run_lines_prefixes_and_continuations() -> None:
    runs = parse_runs("# RUN: not tcc grad %s \\\n#   --of f --wrt x 2>&1 | FileCheck %s --check-prefix=GRAD\n"
                      "# RUN: tcc compile %s\n")
    assert [(r.line, r.argv, r.expect_failure, r.merge_stderr, r.prefix) for r in runs] == [
        (1, ("tcc", "grad", "%s", "--of", "f", "--wrt", "x"), True, True, "GRAD"),
        (3, ("tcc", "compile", "%s"), False, False, "CHECK")]


def test_failure_report_shows_directive_command_and_output(tmp_path: Path) -> None:
    path, _ = _golden(tmp_path, "# CHECK: output y[n]\n# CHECK-NEXT: y[i] = log(x[i])\n")
    with pytest.raises(CheckFailure) as info:
        check_run(path, parse_runs(path.read_text())[0])
    report = str(info.value)
    assert report.splitlines()[0] == f"{path}:5: CHECK-NEXT: y[i] = log(x[i])"
    assert "CHECK-NEXT not found" in report
    assert f"command: tcc compile {path}" in report
    assert "matching had reached output line 2 (marked >>)" in report
    assert ">>    2 | output y[n]" in report
    assert "??    3 | y[i] = exp(x[i])" in report  # the most similar line, FileCheck's 'possible intended match'


def test_check_not_failure_marks_the_line(tmp_path: Path) -> None:
    path, _ = _golden(tmp_path, "# CHECK: output y[n]\n# CHECK-NOT: exp(\n")
    with pytest.raises(CheckFailure) as info:
        check_run(path, parse_runs(path.read_text())[0])
    assert "CHECK-NOT found on output line 3, where it must not be" in str(info.value)
    assert "!!    3 | y[i] = exp(x[i])" in str(info.value)


def test_exit_status_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "bad.tcc"
    path.write_text("# RUN: tcc compile %s\ninput x[5]\ny[i] = x[i + 1]\noutput y[5]\n# CHECK: y\n")
    with pytest.raises(CheckFailure, match="exited 1, expected exit 0"):
        check_run(path, parse_runs(path.read_text())[0])
    path.write_text("# RUN: not tcc compile %s\ninput x[5]\ny[i] = x[i]\n# CHECK: y\n")
    with pytest.raises(CheckFailure, match=r"exited 0, expected exit 1 \(a user error"):
        check_run(path, parse_runs(path.read_text())[0])
