"""Differential fuzzing: random programs over the whole language (tests/fuzz_programs.py), each one

1. compiled for the CPU against the reference interpreter (``tcc.run``): on smooth data to the
   suite's tight tolerance (tests/compare.py), on edge data (negatives, -0.0, inf, NaN, edge
   index arrays) at the case's sizes and at sizes 0 and 1, as tests/test_fuzz_edge.py compares
   (NaN where NaN is, the same infinities, -0.0 == 0.0, a term-by-term build where the
   default pipeline's reassociation may move an overflow);
2. differentiated (``tcc.grad`` of the last definition w.r.t. every float input): the derivative
   program compiled against the interpreter, at the case's sizes and at sizes 0 and 1;
3. its derivatives against central finite differences (``tcc.check``) on smooth data, where the
   generator keeps every function in its domain and away from its kinks;
4. the derivative program's printed text parsed back prints the same text;
5. on a subset (every third program: the simulator is slow), the program and its derivative
   compiled for ``cuda-sim`` against the interpreter;
6. to second order (:func:`check_second_order`, every third CI seed, every seed in the long mode):
   the parsed first derivative differentiated again, printed back (text and ``==``), compiled
   against the interpreter and against finite differences of the first derivative.

A program tcc refuses at compile time fails the test: the generator writes valid programs only.

Modes (environment variables):

- default (CI): ``CI_COUNT`` programs from seed 0, deterministic, with the known-defect
  exclusions of :data:`fuzz_programs.CI_EXCLUSIONS`; about a minute on two cores;
- ``TCC_FUZZ_LONG=1``: 500 programs; ``TCC_FUZZ_COUNT=N`` that many; ``TCC_FUZZ_SEED=S`` the
  first seed (default 0; the long mode's seeds start after CI's); ``TCC_FUZZ_EXCLUDE=none``
  generates the known-defect cases too (or a comma-separated list of the
  :class:`fuzz_programs.Exclusions` flags to keep on), ``TCC_FUZZ_CUDA_SIM=every`` runs the
  simulator on every program.

A failure prints the seed, the program and the stage, and ``TCC_FUZZ_SEED=S TCC_FUZZ_COUNT=1``
reruns that program alone.  ``python tests/test_fuzz_differential.py`` runs the same checks
outside pytest and prints a summary of every failure, grouped by stage and message.
"""
from __future__ import annotations

import os
import sys
from dataclasses import fields, replace
from typing import Any, Callable, Mapping

import numpy as np
import pytest

import tcc
from compare import assert_results_close
from fuzz_programs import CI_EXCLUSIONS, NO_EXCLUSIONS, Case, Exclusions, edge_inputs, generate, smooth_inputs
from tcc.ir.diagnostics import TccError
from test_fuzz_edge import assert_agree, disagreements, term_by_term

CI_COUNT = 36
LONG = os.environ.get("TCC_FUZZ_LONG", "") not in ("", "0")
COUNT = int(os.environ.get("TCC_FUZZ_COUNT", "0")) or (500 if LONG else CI_COUNT)
FIRST = int(os.environ.get("TCC_FUZZ_SEED", str(1000 if (LONG or "TCC_FUZZ_COUNT" in os.environ) else 0)))
CUDA_SIM_EVERY = 1 if os.environ.get("TCC_FUZZ_CUDA_SIM") == "every" else 3
#: the finite-difference check's tolerance (normwise relative, test_autodiff_properties's) and the
#: steps a failing check is retried with (finite-difference noise passes at some step; a wrong
#: derivative at none)
FD_TOL = 1e-6
FD_RETRY_EPS = (1e-5, 1e-4)
#: absolute error below which a derivative agrees whatever its relative error (the values are O(1):
#: the differences' rounding noise is about 1e-10)
FD_ABS_FLOOR = 1e-8


def exclusions_from_env(value: str | None = None) -> Exclusions:
    """``TCC_FUZZ_EXCLUDE``: unset or ``ci`` the CI list, ``none`` nothing, else the flags named."""
    value = os.environ.get("TCC_FUZZ_EXCLUDE", "ci") if value is None else value
    if value == "ci":
        return CI_EXCLUSIONS
    if value == "none":
        return NO_EXCLUSIONS
    names = {n.strip() for n in value.split(",") if n.strip()}
    known = {f.name for f in fields(Exclusions)}
    if names - known:
        raise ValueError(f"unknown TCC_FUZZ_EXCLUDE flags {sorted(names - known)} (known: {sorted(known)})")
    return replace(NO_EXCLUSIONS, **{n: True for n in names})


class Finding(AssertionError):
    """One check of one program that failed: the stage and the case, printed together."""

    def __init__(self, case: Case, stage: str, message: str) -> None:
        super().__init__(f"[{stage}] {message}\n{case.describe()}")
        self.case, self.stage, self.message = case, stage, message


def _results(compiled: Any, want: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The interpreter's arrays of the definitions the compiled call returns (its results)."""
    return {k: v for k, v in want.items() if k in compiled.results}


def _compare_smooth(case: Case, stage: str, program: Any, sizes: Mapping[str, int], target: str = "cpu") -> None:
    """``program`` compiled for ``target`` against the interpreter on smooth data at ``sizes``."""
    inferred = _infer(case, stage, program)
    try:
        inputs = smooth_inputs(inferred, sizes, case.seed)
    except (TccError, ValueError):
        return  # no valid data at these sizes (an index range 0..-1 with entries to fill)
    _compare(case, stage, program, inputs, sizes, target)


def _infer(case: Case, stage: str, program: Any) -> Any:
    try:
        return tcc.transform(program)
    except TccError as err:
        raise Finding(case, stage, f"infer-ranges refuses a valid program: {err}") from None


def _compile(case: Case, stage: str, program: Any, target: str, passes: str | None = None) -> Any:
    try:
        return tcc.compile(program, target, passes=passes)
    except TccError as err:
        raise Finding(case, stage, f"tcc.compile(target={target!r}) refuses a valid program: {err}") from None
    except Exception as err:  # noqa: BLE001 - a traceback from the compiler is a finding too
        raise Finding(case, stage, f"tcc.compile(target={target!r}) crashes: {type(err).__name__}: {err}") from None


def _call(case: Case, stage: str, compiled: Any, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    try:
        with np.errstate(all="ignore"):
            return compiled(**inputs)
    except Exception as err:  # noqa: BLE001
        raise Finding(case, stage, f"the compiled call fails: {type(err).__name__}: {err}") from None


def _compare_edge(case: Case, stage: str, program: Any, sizes: Mapping[str, int]) -> None:
    """Compiled against the interpreter on edge data at ``sizes``."""
    inferred = _infer(case, stage, program)
    try:
        inputs = edge_inputs(inferred, sizes, case.seed)
    except (TccError, ValueError):
        return
    _compare(case, stage, program, inputs, sizes, "cpu")


def _compare(case: Case, stage: str, program: Any, inputs: Mapping[str, np.ndarray], sizes: Mapping[str, int],
             target: str) -> None:
    """The compiled results against the interpreter's: to tests/compare.py's tight tolerance where every
    reference value is finite; else as tests/test_fuzz_edge.py's ``agree`` (NaN where NaN is, the same
    infinities, -0.0 == 0.0): where the default pipeline disagrees, a term-by-term build must agree, and
    the default may differ only where reassociation may (the interpreter non-finite, or the compiled
    value an infinity: an empty max's -inf times a hoisted factor)."""
    compiled = _compile(case, stage, program, target)
    try:
        with np.errstate(all="ignore"):
            want = _results(compiled, tcc.run(program, inputs))
    except Exception as err:  # noqa: BLE001 - the reference refusing valid data is a finding
        raise Finding(case, stage, f"the interpreter fails at sizes {dict(sizes)}: {type(err).__name__}: {err}") from None
    got = _call(case, stage, compiled, inputs)
    where = f"{target} differs from the interpreter at sizes {dict(sizes)}"
    if all(np.isfinite(v).all() for v in want.values()):
        try:
            assert_results_close(got, want, "float64")
        except AssertionError as err:
            raise Finding(case, stage, f"{where}: {err}") from None
        return
    found = disagreements(got, want, "float64")
    if not found:
        return
    strict = _compile(case, stage, program, target, passes=term_by_term(target, "float64"))
    try:
        assert_agree(_call(case, stage, strict, inputs), want, "float64")
        for name, (bad, message) in found.items():
            allowed = ~np.isfinite(want[name]) | np.isinf(got[name])
            assert not (bad & ~allowed).any(), message
    except AssertionError as err:
        raise Finding(case, stage, f"{where} (non-finite data): {err}") from None


def _finite_differences(case: Case, text: str | None = None, of: str | None = None, wrt: list[str] | None = None,
                        stage: str = "finite differences") -> None:
    """``tcc.check`` of ``of`` w.r.t. ``wrt`` in ``text`` (the case's own by default; a first derivative's
    text checks the second derivative tcc.check derives from it)."""
    text, of, wrt = text or case.text, of or case.of, wrt or case.wrt

    def run_check(eps: float, names: list[str]) -> list[Any]:
        try:
            return tcc.check(text, of, names, sizes=case.sizes, tol=FD_TOL, eps=eps, seed=case.seed)
        except TccError as err:
            raise Finding(case, stage, f"tcc.check refuses: {err}") from None

    def bad(results: list[Any]) -> list[Any]:
        # a derivative that is 0 (relu(s) / s) is compared with differences that are rounding noise
        return [r for r in results if not r.ok and r.max_abs_error > FD_ABS_FLOOR]

    failed = bad(run_check(1e-6, wrt))
    for eps in FD_RETRY_EPS:
        if not failed:
            return
        failed = bad(run_check(eps, [r.wrt for r in failed]))
    if failed:
        raise Finding(case, stage, "; ".join(
            f"d{of}/d{r.wrt}: relative error {r.max_rel_error:.3g} (analytic {np.round(r.analytic, 6).tolist()}, "
            f"differences {np.round(r.numeric, 6).tolist()})" for r in failed))


def check_case(case: Case, cuda_sim: bool) -> None:
    """Every check of the module docstring on one generated program; raises :class:`Finding`."""
    try:
        program = tcc.parse(case.text)
        tcc.transform(program)
    except TccError as err:
        raise Finding(case, "parse", f"tcc refuses a valid program: {err}") from None
    printed = str(program)
    try:
        if str(tcc.parse(printed)) != printed:
            raise Finding(case, "program prints back", f"the printed program parses to another one:\n{printed}")
    except TccError as err:
        raise Finding(case, "program prints back", f"the printed program does not parse: {err}\n{printed}") from None
    _compare_smooth(case, "compiled vs interpreter", program, case.sizes)
    for sizes in [case.sizes, *case.edge_sizes]:
        _compare_edge(case, "compiled vs interpreter, edge data", program, sizes)
    try:
        dp = tcc.grad(program, of=case.of, wrt=case.wrt)
    except TccError as err:
        raise Finding(case, "grad", f"tcc.grad refuses: {err}") from None
    text = str(dp)
    try:
        again = str(tcc.parse(text, filename="<grad>"))
    except TccError as err:
        raise Finding(case, "derivative prints back", f"the printed derivative does not parse: {err}\n{text}") from None
    if again != text:
        raise Finding(case, "derivative prints back", f"the printed derivative parses to another program:\n{text}\n---\n{again}")
    for sizes in [case.sizes, *case.edge_sizes]:
        _compare_smooth(case, "derivative compiled vs interpreter", dp, sizes)
    _finite_differences(case)
    if cuda_sim:
        _compare_smooth(case, "cuda-sim vs interpreter", program, case.sizes, "cuda-sim")
        _compare_smooth(case, "derivative cuda-sim vs interpreter", dp, case.sizes, "cuda-sim")


def _prints_back(case: Case, stage: str, program: Any) -> Any:
    """The printed ``program`` parsed back: the same text and the same program (a :class:`Finding` if not)."""
    text = str(program)
    try:
        again = tcc.parse(text, filename="<printed>")
    except TccError as err:
        raise Finding(case, stage, f"the printed program does not parse: {err}\n{text}") from None
    if str(again) != text or again != program:
        raise Finding(case, stage, f"the printed program parses to another program:\n{text}\n---\n{again}")
    return again


def check_second_order(case: Case, exclude: Exclusions = NO_EXCLUSIONS) -> None:
    """The closure to second order: the first derivative's printed text, parsed, is differentiated
    again (``d(d of / d x) / d x``, ``x`` the first of ``case.wrt``); that second derivative prints
    back, compiles, equals the interpreter (at the case's sizes and at sizes 0 and 1) and, by
    ``tcc.check`` on the first derivative's text, central finite differences of the first derivative."""
    try:
        program = tcc.parse(case.text)
        first = tcc.grad(program, of=case.of, wrt=case.wrt)
    except TccError as err:
        raise Finding(case, "grad", f"tcc.grad refuses: {err}") from None
    parsed = _prints_back(case, "derivative prints back", first)
    wrt = case.wrt[0]
    try:
        second = tcc.grad(parsed, of="d" + wrt, wrt=[wrt])
    except TccError as err:
        raise Finding(case, "second grad", f"tcc.grad of the parsed derivative refuses: {err}") from None
    _prints_back(case, "second derivative prints back", second)
    try:
        for sizes in [case.sizes, *case.edge_sizes]:
            _compare_smooth(case, "second derivative compiled vs interpreter", second, sizes)
    except Finding as f:
        if exclude.second_order_bounds_refusal and "may be out of bounds" in f.message:
            return  # a known defect (fuzz_programs.Exclusions.second_order_bounds_refusal)
        raise
    if exclude.second_order_csr_reduction and {"csr", "max_min_reduction"} <= case.features:
        return  # a known defect (fuzz_programs.Exclusions.second_order_csr_reduction)
    _finite_differences(case, str(parsed), "d" + wrt, [wrt], "second-order finite differences")


SEEDS = list(range(FIRST, FIRST + COUNT))
#: every how many seeds the second-order closure runs (CI: a third of them, about 12 programs; the long
#: mode and TCC_FUZZ_COUNT: all)
SECOND_ORDER_EVERY = 1 if (LONG or "TCC_FUZZ_COUNT" in os.environ) else 3


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz_program(seed: int) -> None:
    case = generate(seed, exclusions_from_env())
    check_case(case, cuda_sim=seed % CUDA_SIM_EVERY == 0)


@pytest.mark.parametrize("seed", SEEDS[::SECOND_ORDER_EVERY])
def test_fuzz_second_order(seed: int) -> None:
    exclude = exclusions_from_env()
    check_second_order(generate(seed, exclude), exclude)


def test_generator_covers_the_language() -> None:
    """The CI seeds exercise every feature the generator knows (a lost feature is lost coverage)."""
    seen: set[str] = set()
    for seed in range(CI_COUNT):
        seen |= generate(seed, CI_EXCLUSIONS).features
    wanted = {"stride", "flip", "diagonal", "size_offset", "combination", "guarded_shift", "gather", "csr", "assume",
              "sum", "triangular_sum", "possibly_empty_sum", "clamped_bounds", "inferred_range", "constrained_sum",
              "where_index", "where_value", "power", "division", "index_value", "def_custom", "def_plain",
              "local_read", "inferred_extent", "floor_division", "max_min_reduction", "max_min_values"}
    if CI_EXCLUSIONS.floor_division_reads:
        wanted.discard("floor_division")  # a known-defect exclusion (fuzz_programs.Exclusions)
    assert wanted <= seen, f"never generated by the CI seeds: {sorted(wanted - seen)}"


def _summary(seeds: list[int], exclude: Exclusions, report: Callable[[str], None] = print) -> int:
    """Run every seed outside pytest, and print each failure and a count by stage."""
    failures: dict[str, list[Finding]] = {}
    for seed in seeds:
        case = generate(seed, exclude)
        try:
            check_case(case, cuda_sim=seed % CUDA_SIM_EVERY == 0)
            if seed % SECOND_ORDER_EVERY == 0:
                check_second_order(case, exclude)
        except Finding as f:
            failures.setdefault(f.stage, []).append(f)
            report(f"=== seed {seed}: {f}")
        except Exception as err:  # noqa: BLE001 - the harness's own crash is worth seeing too
            report(f"=== seed {seed}: harness error {type(err).__name__}: {err}\n{case.describe()}")
    for stage, items in failures.items():
        report(f"{stage}: {len(items)} programs (seeds {[f.case.seed for f in items]})")
    return sum(len(v) for v in failures.values())


if __name__ == "__main__":
    sys.exit(1 if _summary(SEEDS, exclusions_from_env()) else 0)
