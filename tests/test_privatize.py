"""``privatize``: column reductions as per-part partial rows, hosted by the row kernel that makes their rows.

Checked against the reference interpreter (float32 and float64, one and two
threads, given output arrays, extents 0, 1 and primes, NaN, inf and -0
data, hypothesis-generated programs), for the IR it prints (the host, the
refusals), for the race rule it relies on (``parallel`` and the verifier
accept ``P*t + p``, reject it when ``p`` spans more than ``P``), and for
bits that do not depend on the thread count.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tcc
from compare import assert_compiled_matches, assert_matches_interpreter, random_inputs
from family_sources import LAYERNORM
from tcc.backends.builtin_targets import DEFAULT_LOOP_PIPELINE
from tcc.instruments import VerifyEach
from tcc.ir.diagnostics import TccError
from tcc.ir.loops_parser import parse_loop_program
from tcc.ir.loops_verifier import verify_loops
from tcc.passes.parallel import parallelize
from tcc.passes.privatize import Privatize
from tcc.pipeline import run_pipeline

NO_PRIVATIZE = DEFAULT_LOOP_PIPELINE.replace(",privatize,", ",")

DENSE = """input X[{A}, 64], W[{C}, 64], b[{C}]
Y[a, c] = tanh(sum[k](X[a, k] * W[c, k]) + b[c])
"""
# only inputs: the partial rows get a kernel of their own, both sums in one pass over the rows
INPUTS_ONLY = """input G[{A}, {C}], H[{A}, {C}]
output s[{C}], t[{C}]
s[c] = sum[a](G[a, c] * H[a, c])
t[c] = 2 * sum[a](G[a, c]) + 1
"""


def _layernorm_grad(A: int, C: int) -> tuple[object, list[str]]:
    program = tcc.parse(LAYERNORM.format(A=A, C=C))
    return tcc.grad(program, of="Y", wrt=["X", "g", "b"], value=True), ["Y", "dX", "dg", "db"]


def _loops(program, passes: str = DEFAULT_LOOP_PIPELINE) -> str:
    return str(run_pipeline(tcc.transform(program, "infer-ranges"), passes))


def _kernel(text: str, name: str) -> str:
    start = text.index(f"kernel {name} {{")
    return text[start: text.index("\n}\n", start) + 3]


def _check(program, results: list[str] | None, dtype: str = "float64", threads: int | None = None,
           inputs: dict | None = None, given_outputs: bool = False) -> dict:
    inferred = tcc.transform(program, "infer-ranges")
    inputs = inputs if inputs is not None else random_inputs(inferred, None, 3, dtype)
    return assert_compiled_matches(program, inputs, dtype, threads, results=results, given_outputs=given_outputs)


# ---------------------------------------------------------------------------
# what it prints
# ---------------------------------------------------------------------------


def test_layernorm_gradient_hosts_both_column_sums_in_the_row_kernel() -> None:
    program, results = _layernorm_grad(512, 64)
    f = tcc.compile(program, results=results)
    text = str(f.loops)
    assert "temp dg_part[32, 64], db_part[32, 64]" in text
    host = text[text.index("kernel mu_"): text.index("kernel dg_db")]
    assert host.splitlines()[1].strip() == "parallel for p in 0..31 {"   # the parts run on the threads
    assert "dg_part[p, dX_1] += dY[p + 32*t, dX_1]" in host               # one pass: in the row's own dX loop
    assert "db_part[p, dX_1] += dY[p + 32*t, dX_1]" in host               # (fuse-inner), both sums
    assert "dX[p + 32*t, dX_1] =" in host
    combine = _kernel(text, "dg_db")
    assert "+= dg_part[q, " in combine and "+= db_part[q2, " in combine
    assert "for dg_z0" not in combine                                     # no pass over the rows left


def test_dense_bias_gradient_is_summed_in_the_epilogue_kernel() -> None:
    program = tcc.grad(tcc.parse(DENSE.format(A=256, C=96)), of="Y", wrt=["X", "W", "b"], value=True)
    text = str(tcc.compile(program, results=["Y", "dX", "dW", "db"]).loops)
    host = text[text.index("kernel Y_dX_lhs {"):]
    host = host[: host.index("\n}\n")]
    assert "parallel for p in 0..31 {" in host and "db_part[p, " in host
    assert "extern matmul(dX_lhs, W) -> dX" in text   # the products between host and combine stay where they were
    assert text.index("kernel dX {") < text.index("kernel db {")


def test_a_reduction_over_inputs_gets_one_kernel_for_all_its_sums() -> None:
    text = _loops(tcc.parse(INPUTS_ONLY.format(A=128, C=40)))
    assert text.count("parallel for p in 0..15 {") == 1      # 128 rows, 8 per part: 16 parts
    part = _kernel(text, "s_t_rows")
    assert "s_part[p, c2] += G[p + 16*t2, c2] * H[p + 16*t2, c2]" in part  # t is taken: a result
    assert "t_part[p, c2] += G[p + 16*t2, c2]" in part


@pytest.mark.parametrize("src, why", [
    ("input G[n, 64]\ns[c] = sum[a](G[a, c])\n", "a symbolic row count"),
    ("input G[12, 64]\ns[c] = sum[a](G[a, c])\n", "12 rows: fewer than 8 per part for 2 parts"),
    ("input G[64, 64]\ns[a] = sum[c](G[a, c])\n", "a row reduction"),
    ("input G[64, 20000]\ns[c] = sum[a](G[a, c])\n", "a partial row over max-row-bytes"),
])
def test_refusals(src: str, why: str) -> None:
    program = tcc.parse(src)
    assert _loops(program) == _loops(program, NO_PRIVATIZE), why


def test_a_producer_that_writes_other_rows_does_not_host() -> None:
    # the sum reads u at row 63 - a, which u's kernel writes in another iteration -> a kernel of its own
    src = """input X[64, 32]
local u[64, 32]
output s[32]
u[a, c] = X[a, c] * 2
s[c] = sum[a](u[63 - a, c] * X[a, c])
"""
    program = tcc.parse(src)
    text = _loops(program)
    assert "kernel s_rows" in text
    assert_matches_interpreter(program)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_second_reduction_reading_another_row_of_the_host_gets_its_own_kernel(threads: int) -> None:
    # found in review: u joined mu's kernel (which s had made a host) without the producer test, and read
    # mu[63 - a] before that row was computed
    src = """input X[64, 16]
local mu[64]
output s[16], u[16]
mu[a] = sum[c](X[a, c])
s[c] = sum[a](X[a, c] * mu[a])
u[c] = sum[a](X[a, c] * mu[63 - a])
"""
    program = tcc.parse(src)
    text = _loops(program)
    assert "s_part[p, " in _kernel(text, "mu") and "u_part" not in _kernel(text, "mu")
    assert "kernel u_rows" in text
    X = np.random.default_rng(1).uniform(0.25, 0.75, (64, 16))
    f = tcc.compile(program, threads=threads)
    got = f(X=X)
    np.testing.assert_allclose(got["u"], (X * X.sum(1)[::-1, None]).sum(0), rtol=1e-12)
    np.testing.assert_allclose(got["s"], (X * X.sum(1)[:, None]).sum(0), rtol=1e-12)


# ---------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_layernorm_gradient_matches_the_interpreter(dtype: str, threads: int) -> None:
    program, results = _layernorm_grad(97, 13)
    _check(program, results, dtype, threads)
    _check(program, results, dtype, threads, given_outputs=True)


@pytest.mark.parametrize("A, C", [(16, 1), (17, 7), (64, 0), (8 * 32 + 5, 3)])
def test_edge_extents(A: int, C: int) -> None:
    program = tcc.parse(INPUTS_ONLY.format(A=A, C=C))
    _check(program, None)
    assert_matches_interpreter(tcc.parse(DENSE.format(A=A, C=max(C, 1))), threads=2)


def test_symbolic_columns_including_zero() -> None:
    src = "input G[64, m], H[64, m]\noutput s[m]\ns[c] = sum[a](G[a, c] * H[a, c])\n"
    program = tcc.parse(src)
    assert "kernel s_rows" in _loops(program)
    for m in (0, 1, 37):
        assert_matches_interpreter(program, {"m": m}, threads=2)


def test_edge_data_nan_inf_and_negative_zero() -> None:
    program = tcc.parse(INPUTS_ONLY.format(A=64, C=6))
    G = np.full((64, 6), -0.0)
    H = np.full((64, 6), 1.0)
    G[3, 1] = np.inf                  # +inf alone: inf
    G[5, 2], G[40, 2] = np.inf, -np.inf  # in different parts: NaN, as the sequential sum
    G[7, 3] = np.nan
    G[:, 4] = np.arange(64) * 1e-3
    got = _check(program, None, inputs={"G": G, "H": H})
    assert np.isposinf(got["s"][1]) and np.isnan(got["s"][2]) and np.isnan(got["s"][3])
    assert got["s"][0] == 0 and not np.signbit(got["s"][0])  # -0 terms sum to +0 from acc = 0, as the interpreter


def test_bits_do_not_depend_on_the_thread_count() -> None:
    program, results = _layernorm_grad(200, 24)
    inputs = random_inputs(tcc.transform(program, "infer-ranges"), None, 5)
    one = tcc.compile(program, threads=1, results=results)(**inputs)
    two = tcc.compile(program, threads=2, results=results)(**inputs)
    for name in results:
        assert np.array_equal(one[name], two[name]), name


FORMS = [
    "X[a, c] * m[a]",
    "(X[a, c] - m[a])**2",
    "Z[a, c] * X[a, c]",
    "exp(-Z[a, c])",
    "Z[a, c]",
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(A=st.integers(16, 90), C=st.integers(1, 24), forms=st.lists(st.sampled_from(FORMS), min_size=1, max_size=3),
       epilogue=st.booleans(), dtype=st.sampled_from(["float64", "float32"]), threads=st.sampled_from([1, 2]))
def test_random_programs_match_the_interpreter(A, C, forms, epilogue, dtype, threads) -> None:
    lines = [f"input X[{A}, {C}], w[{C}]", "local m[{A}], Z[{A}, {C}]".format(A=A, C=C),
             "m[a] = sum[c](X[a, c] * w[c])", "Z[a, c] = X[a, c] * m[a] + w[c]"]
    for i, form in enumerate(forms):
        body = f"sum[a]({form})"
        lines.append(f"s{i}[c] = " + (f"sqrt(1 + {body}**2) - w[c]" if epilogue else body))
    program = tcc.parse("\n".join(lines) + "\n")
    _check(program, None, dtype, threads)


# ---------------------------------------------------------------------------
# the race rule it relies on
# ---------------------------------------------------------------------------

HEAD = "# tcc loops\ninput X[64]\noutput y[64]\n\n"


def test_parallel_and_the_verifier_accept_rows_dealt_to_parts() -> None:
    ok = parse_loop_program(HEAD + "kernel k {\n  for p in 0..7 {\n    for t in 0..7 {\n"
                            "      y[8*t + p] = X[8*t + p] * 2\n    }\n  }\n}\n")
    marked = parallelize(ok)
    assert marked.kernels[0].body[0].parallel
    verify_loops(marked)


def test_parts_spanning_more_than_the_stride_race() -> None:
    # p in 0..8 is nine parts dealt with stride 8: p = 8, t = 0 and p = 0, t = 1 both write y[8]
    bad = HEAD + "kernel k {\n  for p in 0..8 {\n    for t in 0..6 {\n      y[8*t + p] = X[8*t + p] * 2\n    }\n  }\n}\n"
    assert not parallelize(parse_loop_program(bad)).kernels[0].body[0].parallel
    with pytest.raises(TccError, match=r"parallel loop 'p' may race: no index of y\[p \+ 8\*t\] is 'p' times a nonzero"):
        verify_loops(parse_loop_program(bad.replace("for p in", "parallel for p in")))


def test_option_errors() -> None:
    with pytest.raises(ValueError, match="min-rows must be a positive integer, not 0"):
        Privatize(min_rows=0)
    with pytest.raises(ValueError, match="max-parts must be a positive integer, not True"):
        Privatize(max_parts=True)


def test_verify_each_accepts_the_pipeline() -> None:
    program, results = _layernorm_grad(64, 16)
    f = tcc.compile(program, results=results, instruments=[VerifyEach()])
    assert "dg_part" in str(f.loops)
