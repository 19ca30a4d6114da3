"""Fuzz: random programs and their gradients, compiled, against the interpreter on edge data.

The programs are those of the property tests (``programs`` and
``inferred_programs`` of test_autodiff_properties: strided, flipped,
diagonal and rank-deficient maps, nested and triangular sums -- empty for some
output points -- and ``where`` guards), their result optionally passed
through a function with edge behaviour (``sign``, ``relu``, ``abs``,
``sqrt``, ``log``, ``**0.5``, ``**s``).  The data are what the property tests
avoid: 0, -0, inf, -inf and NaN among finite values of one magnitude class
(moderate, huge or tiny: subnormals included), and symbolic sizes 0 and 1.

Compiled code (the default CPU pipeline in float64 and float32, and the
GPU pipeline in the ``cuda-sim`` simulator) must agree with the interpreter
in the same dtype as docs/language.md ("Edge cases") says: NaN at the same
places, infinities at the same places with the same sign, and finite values
within a normwise error (relative to the largest value, absolute below 1:
the summation order may differ, since the CPU reassociates reductions, and
math functions differ by an ulp or two between libm and NumPy).  The sign of a zero result is not compared: it is
specified for ``sign``, ``relu`` and ``**`` (tests/test_edge_semantics.py)
but not for sums, whose accumulator starts at +0.

By default the examples are few and derived deterministically, in CI and
locally; ``TCC_FUZZ_EXAMPLES=2000`` runs that many fresh random ones.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np
from hypothesis import HealthCheck, assume, example, given, note, settings, strategies as st

import tcc
from tcc.ir.diagnostics import TccError
from tcc.build import DEFAULT_GPU_PIPELINE, DEFAULT_LOOP_PIPELINE
from tcc.reference.interpreter import evaluate
from tcc.sizes import extents_shape
from test_autodiff_properties import inferred_programs, programs

EXAMPLES = int(os.environ.get("TCC_FUZZ_EXAMPLES", "0")) or None

# The same few examples on every run (as the other property tests): a failure
# is a bug, never bad luck.  TCC_FUZZ_EXAMPLES=N explores N fresh random ones.
SETTINGS = settings(
    max_examples=EXAMPLES or 6,
    deadline=None,
    derandomize=EXAMPLES is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

#: normwise error allowed for finite values, by dtype (see assert_agree)
RTOL = {"float64": 1e-9, "float32": 2e-4}

SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan]
#: (smallest, largest) magnitude of the finite values of one example
REGIMES = {"moderate": (0.25, 4.0), "huge": (1e150, 1e300), "tiny": (5e-324, 1e-300), "unit": (1.0, 1.0)}
#: regimes whose products or quotients overflow: reassociation may move the overflow (see agree)
OVERFLOWING = ("huge", "tiny")
#: a function of the whole result (``{}`` is the body); ``s`` is a scalar input where used
WRAPS = ["{}", "{}", "sign({})", "relu({})", "abs({})", "sqrt({})", "log({})", "({})**0.5", "({})**s", "({})**1.5"]


@st.composite
def edge_data(draw: Any) -> tuple[str, float, int, float, float]:
    """How to fill the inputs: (regime, fraction of specials, seed, exponent s, sign-flip probability)."""
    regime = draw(st.sampled_from(sorted(REGIMES)))
    special = draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))
    seed = draw(st.integers(0, 2**16))
    s = draw(st.sampled_from([0.5, 1.5, 2.0, -0.5, 0.0, 3.0, np.inf, np.nan]))
    flip = draw(st.sampled_from([0.0, 0.3]))
    return regime, special, seed, s, flip


def fill(program: Any, sizes: Mapping[str, int], how: tuple[str, float, int, float, float], dtype: str) -> dict[str, np.ndarray]:
    """Edge inputs for every input of ``program`` (a scalar ``s`` gets the drawn exponent)."""
    regime, special, seed, s, flip = how
    lo, hi = REGIMES[regime]
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for d in program.inputs:
        if d.name == "s" and not d.extents:
            out["s"] = np.asarray(s, dtype=dtype)
            continue
        shape = extents_shape(d.extents, sizes)
        magnitude = np.exp(rng.uniform(np.log(lo), np.log(hi), shape))
        values = np.where(rng.random(shape) < flip, -magnitude, magnitude)
        picks = rng.integers(0, len(SPECIALS), shape)
        values = np.where(rng.random(shape) < special, np.asarray(SPECIALS)[picks], values)
        with np.errstate(over="ignore", under="ignore"):
            out[d.name] = values.astype(dtype)
    return out


def wrap(text: str, how: str) -> str:
    """The program with its definition of ``f`` passed through ``how`` (and an input ``s`` if it needs one)."""
    lines = text.rstrip("\n").split("\n")
    head, eq, body = lines[-1].partition(" = ")
    assert eq and head.split("[")[0] == "f", text
    lines[-1] = f"{head} = {how.format(body)}"
    if "**s" in how:
        lines[0] += ", s"
    return "\n".join(lines) + "\n"


def disagreements(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], dtype: str) -> dict[str, tuple[np.ndarray, str]]:
    """Per result, the points where compiled and interpreter disagree, and the first one described.

    NaN must be where NaN is, inf where inf is with its sign; finite values
    agree within RTOL normwise: relative to the largest value, but never
    tighter than RTOL absolute (the math functions of compiled code -- libm,
    tcc's inline exp -- and NumPy's differ by an ulp or two, and cancellation
    amplifies that without bound: 1 - tanh(10.27)**2, a derivative of tanh,
    differs in the 8th digit).
    """
    assert set(got) == set(want)
    found: dict[str, tuple[np.ndarray, str]] = {}
    for name, ref in want.items():
        out = got[name]
        assert out.shape == ref.shape and out.dtype == ref.dtype, name
        nan, inf = np.isnan(ref), np.isinf(ref)
        bad_nan = np.isnan(out) != nan
        bad_inf = (np.isinf(out) != inf) | (inf & (out != ref))
        bad_finite = np.zeros(ref.shape, dtype=bool)
        finite = np.isfinite(ref) & np.isfinite(out)
        if finite.any():
            r, o = ref.astype(np.float64), out.astype(np.float64)
            tol = RTOL[dtype] * max(float(np.max(np.abs(r[finite]))), 1.0)
            with np.errstate(invalid="ignore"):
                bad_finite = finite & (np.abs(o - r) > tol)
        bad = bad_nan | bad_inf | bad_finite
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            kind = "NaN" if bad_nan[at] else "inf" if bad_inf[at] else "value"
            found[name] = (bad, f"{name}: {kind} disagrees at {at}: compiled {out[at]!r}, interpreter {ref[at]!r} ({dtype})")
    return found


def assert_agree(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], dtype: str) -> None:
    found = disagreements(got, want, dtype)
    assert not found, "; ".join(message for _, message in found.values())


def term_by_term(target: str, dtype: str) -> str:
    """The default pipeline without reassociation: ``hoist`` factors nothing out of a sum and
    LLVM adds in the interpreter's order (docs/passes.md, "Factoring and IEEE arithmetic")."""
    if target == "cpu":
        return DEFAULT_LOOP_PIPELINE.replace("hoist", "hoist{factor=false}") + (
            f",lower-llvm{{dtype={dtype} reassociate=never}}"
        )
    return DEFAULT_GPU_PIPELINE.replace("hoist", "hoist{factor=false}")  # the GPU never reassociates


def agree(program: Any, sizes: Mapping[str, int], how: tuple, dtype: str = "float64", target: str = "cpu",
          passes: Any = None) -> None:
    """Compile ``program`` for ``target`` in ``dtype`` and compare it with the interpreter on edge data.

    A program the interpreter refuses for these sizes (a negative extent) must
    be refused by the compiled code as well.

    The default pipeline reassociates (``hoist`` factors invariants out of
    sums; the CPU reorders reductions), and docs/passes.md says what that may
    change: where overflow happens, and ``±inf`` where a non-empty sum times
    an infinite invariant is NaN term by term.  So where the default pipeline
    disagrees, the same program compiled term by term must agree exactly, and
    the default's disagreements must be of those kinds only: the interpreter
    non-finite, or the compiled value ``±inf``.  Never a NaN (or a finite
    value) where the interpreter has a finite one and no overflow: that is the
    empty-sum-times-inf bug (an empty sum's 0 times an
    invariant inf, hoisted out of the sum, came out NaN).  With magnitudes that overflow when
    multiplied (or divided: 1 / 5e-324), a moved overflow can also meet a
    zero (``inf * 0``), so there only the term-by-term agreement is asked.
    """
    inferred = tcc.transform(program, "infer-ranges")
    try:
        inputs = fill(inferred, sizes, how, dtype)
    except ValueError:  # a negative extent: no arrays to make
        assume(False)
    note(f"{target} {dtype} inputs: {inputs!r}")
    compiled = tcc.compile(program, target, dtype=dtype, passes=passes)
    try:
        want = evaluate(inferred, inputs, dtype)
    except TccError as err:
        note(f"interpreter: {err}")
        try:
            compiled(**inputs)
        except TccError:
            return
        raise AssertionError(f"the interpreter refuses the inputs ({err}) but compiled code runs")
    got = compiled(**inputs)
    found = disagreements(got, want, dtype)
    if not found:
        return
    assert passes is None, "; ".join(message for _, message in found.values())
    strict = tcc.compile(program, target, dtype=dtype, passes=term_by_term(target, dtype))
    assert_agree(strict(**inputs), want, dtype)
    if how[0] in OVERFLOWING:
        return  # overflow may move anywhere: inf * 0 = NaN where the interpreter's order gives 0
    for name, (bad, message) in found.items():
        allowed = ~np.isfinite(want[name]) | np.isinf(got[name])
        assert not (bad & ~allowed).any(), message
    note("the default pipeline differs only where reassociation may: " + "; ".join(m for _, m in found.values()))


def _sizes_used(program: Any, sizes: Mapping[str, int]) -> dict[str, int]:
    used = set(tcc.transform(program, "infer-ranges").sizes())
    return {k: v for k, v in sizes.items() if k in used}


@SETTINGS
@given(programs(), st.sampled_from(WRAPS), edge_data())
def test_fuzz_programs_and_gradients_on_edge_data(prog: tuple, how: str, data: tuple) -> None:
    text, wrt = prog
    text = wrap(text, how)
    note(text)
    program = tcc.parse(text)
    agree(program, {}, data)
    agree(program, {}, data, "float32")
    agree(program, {}, data, target="cuda-sim")
    grad = tcc.grad(program, of="f", wrt=wrt)
    note(str(grad))
    agree(grad, {}, data)


EMPTY_SUM_TIMES_INF = ("input x[n], y[n]\nf[i] = sum[k: i + 1..n - 1](x[k] / y[i])\n", ["x", "y"], {"n": 4})
SUMS_OVER_M = ("input x[n], y[m]\nf[i] = sigmoid(x[i]) * tanh(sum[k](y[k]) + 1)\n", ["x", "y"], {"n": 2, "m": 3, "p": 1})


@SETTINGS
@given(inferred_programs(), st.sampled_from(WRAPS), edge_data(), st.dictionaries(st.sampled_from("nmp"), st.integers(0, 2)))
# every sum empty (m = 0: y has no elements, f has n), and no output at all (n = 0)
@example(SUMS_OVER_M, "{}", ("moderate", 0.5, 1, 0.5, 0.0), {"n": 2, "m": 0}).via("sizes 0")
@example(SUMS_OVER_M, "log({})", ("huge", 0.5, 2, 0.5, 0.3), {"n": 0, "m": 1}).via("sizes 0")
# the empty-sum reproducer: the empty sum of f[3] times the invariant 1/y[3] = inf was NaN
@example(EMPTY_SUM_TIMES_INF, "{}", ("unit", 0.5, 45, 0.5, 0.0), {"n": 4}).via("empty sum times inf")
def test_fuzz_symbolic_sizes_zero_and_one(prog: tuple, how: str, data: tuple, small: dict) -> None:
    text, wrt, sizes = prog
    text = wrap(text, how)
    note(text)
    try:
        program = tcc.transform(text, "infer-ranges")
    except TccError:
        assume(False)
        raise
    sizes = _sizes_used(program, {**sizes, **small})
    note(repr(sizes))
    agree(program, sizes, data)
    grad = tcc.grad(program, of="f", wrt=wrt)
    note(str(grad))
    agree(grad, sizes, data, target="cuda-sim")
