"""Property tests for the compiler proper: random programs (the generators of
test_autodiff_properties: strided, flipped, diagonal, rank-deficient maps,
nested sums, where guards, symbolic sizes) and their derivatives, compiled
with the full pipeline and with L2 optimisations off, against the reference
interpreter."""
from __future__ import annotations

from hypothesis import HealthCheck, assume, given, note, settings

import tcc
from compare import assert_matches_interpreter
from tcc.ir.diagnostics import TccError
from test_autodiff_properties import inferred_programs, programs

SETTINGS = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


def _compare_all(text: str, wrt, sizes=None) -> None:
    note(text)
    program = tcc.parse(text)
    assert_matches_interpreter(program, sizes)
    grad = tcc.grad(program, of="f", wrt=wrt)
    note(str(grad))
    assert_matches_interpreter(grad, sizes)
    assert_matches_interpreter(grad, sizes, passes="infer-ranges,lower-loops")
    assert_matches_interpreter(grad, sizes, dtype="float32")


@SETTINGS
@given(programs())
def test_random_programs_compile(prog):
    text, wrt = prog
    _compare_all(text, wrt)


@SETTINGS
@given(inferred_programs())
def test_random_symbolic_programs_compile(prog):
    text, wrt, sizes = prog
    try:
        tcc.transform(text, "infer-ranges")
    except TccError:
        assume(False)
    _compare_all(text, wrt, sizes)


# The GPU pipeline with split-reduction forced on small programs (a handful of
# threads wanted, two terms per part), in cuda-sim: the grid mapping, nested
# parallel bands, full fusion and the partial-sum kernels on random programs.
GPU_AGGRESSIVE = (
    "infer-ranges,lower-loops,hoist,fuse{full=true},reuse-buffers,parallel{depth=8},"
    "split-reduction{threads=8 min-work=1}"
)


def _compare_gpu(text: str, wrt, sizes=None) -> None:
    note(text)
    program = tcc.parse(text)
    grad = tcc.grad(program, of="f", wrt=wrt)
    note(str(grad))
    for p in (program, grad):
        assert_matches_interpreter(p, sizes, target="cuda-sim")
        assert_matches_interpreter(p, sizes, passes=GPU_AGGRESSIVE, target="cuda-sim")


@SETTINGS
@given(programs())
def test_random_programs_in_the_gpu_simulator(prog):
    text, wrt = prog
    _compare_gpu(text, wrt)


@SETTINGS
@given(inferred_programs())
def test_random_symbolic_programs_in_the_gpu_simulator(prog):
    text, wrt, sizes = prog
    try:
        tcc.transform(text, "infer-ranges")
    except TccError:
        assume(False)
    _compare_gpu(text, wrt, sizes)
