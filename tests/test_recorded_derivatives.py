"""Every derivative program the rest of the suite produced, compiled and compared.

``conftest.py`` records each distinct program a pipeline with ``autodiff``
returned (gradients, second derivatives, partial pipelines that still hold
constrained sums).  Its tests carry the ``recorded_corpus`` marker, which
conftest.py moves behind every other collected test, so in a full run they
see them all; run alone the module records the examples' gradients itself.
"""
from __future__ import annotations

import concurrent.futures
import pathlib

import pytest

import tcc
from compare import assert_matches_interpreter
from conftest import RECORDED_DERIVATIVES
from tcc.ir.diagnostics import TccError
from tcc.reference.fdcheck import sizes_for

pytestmark = [pytest.mark.recorded_corpus, pytest.mark.slow]


def _own_corpus() -> None:
    root = pathlib.Path(__file__).resolve().parent.parent / "examples"
    for path in sorted(root.glob("*.tcc")):
        p = tcc.transform(tcc.parse(path), "infer-ranges")
        for of in p.results():
            tcc.grad(p, of=of, wrt=[d.name for d in p.inputs if not d.is_index])


#: the corpus after infer-ranges, by corpus size: the module's tests share it (the proofs of
#: infer-ranges over up to 400 programs took a large part of each test)
_PREPARED: dict[int, list] = {}


def _recorded_programs() -> list:
    """The recorded derivatives after infer-ranges, without tests' deliberately broken intermediates."""
    if len(RECORDED_DERIVATIVES) < 5:
        _own_corpus()
    size = len(RECORDED_DERIVATIVES)
    if size not in _PREPARED:
        _PREPARED[size] = _prepare()
    return list(_PREPARED[size])


def _prepare() -> list:
    programs = []
    for program in RECORDED_DERIVATIVES.values():
        try:
            programs.append(tcc.transform(program, "infer-ranges"))
        except TccError:
            continue  # a test's deliberately broken intermediate; the compile path rejects it the same way
    return programs


def _compare_each(programs: list, compare, total: int) -> None:
    """``compare(program, sizes)`` at each program's default sizes; at least 90 % of ``total`` must be
    checked, and the only acceptable refusal is "these sizes make an extent negative"."""
    checked = 0
    for program in programs:
        try:
            compare(program, sizes_for(program))
        except TccError as exc:
            if "negative extent" not in exc.message:
                raise
            continue
        checked += 1
    assert checked >= 0.9 * total, f"only {checked} of {total} recorded derivatives were checked"


def test_recorded_derivatives_compile_and_match():
    programs = _recorded_programs()
    assert len(RECORDED_DERIVATIVES) >= 5
    _compare_each(programs, assert_matches_interpreter, len(RECORDED_DERIVATIVES))


def test_recorded_derivatives_give_ptx_that_ptxas_accepts():
    """Every recorded derivative lowered for the GPU: PTX for sm_80, assembled for sm_80 and sm_90."""
    from tcc.backends import ptx
    from tcc.build import compile_pipeline
    from tcc.pipeline import run_pipeline

    if ptx.find_ptxas() is None:
        pytest.skip("the CUDA toolkit's ptxas was not found (set CUDA_HOME); PTX is not assembled")
    try:
        ptx.find_libdevice()
    except TccError as exc:
        pytest.skip(exc.message)
    from tcc.ir.expr import MatrixFn

    # the cuda target refuses matrix functions and products (tests/test_matrix_functions.py,
    # tests/test_blas.py check the refusal)
    programs = [p for p in _recorded_programs() if not any(isinstance(d.body, MatrixFn) for d in p.definitions)]
    pipeline = compile_pipeline(None, "float64", "cuda", "sm_80")
    # ptxas runs as a subprocess: two of them at a time overlap this thread's PTX generation (the test
    # took 100 s of the suite's 17 minutes one step after the other, 58 % of it in ptxas)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(ptx.ptxas, text, arch)
                for text in (str(run_pipeline(program, pipeline)) for program in programs)
                for arch in ("sm_80", "sm_90")]
        for job in jobs:
            job.result()  # re-raises ptxas's refusal (TccError with its message)
    assert len(programs) >= 5


def test_recorded_derivatives_run_in_the_gpu_simulator():
    """A deterministic sample (every fourth) of the recorded derivatives through cuda-sim's grid kernels."""
    programs = _recorded_programs()[::4]
    _compare_each(programs, lambda p, sizes: assert_matches_interpreter(p, sizes, target="cuda-sim"), len(programs))


@pytest.mark.gpu
def test_recorded_derivatives_on_the_gpu_match_the_cpu():
    """Every recorded derivative compiled for ``cuda`` against the CPU backend (skips without a GPU)."""
    from test_cuda_gpu import REASON, assert_gpu_matches_cpu

    if REASON is not None:
        pytest.skip(REASON)
    programs = _recorded_programs()
    _compare_each(programs, assert_gpu_matches_cpu, len(programs))
