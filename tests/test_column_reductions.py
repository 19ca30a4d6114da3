"""Column max/min reductions over inferred ranges, compiled for the CPU.

``y[j] = max[i](lg[i, j])`` lowers to a scalar accumulator updated by a store
(``acc = max(acc, lg[i, j])``, not an ``acc += ..``).  The ``tile`` pass jams
16 columns into one strip with one accumulator per column; renaming the
accumulator in the reads but not in the store's target left the kernel
storing into a name that no longer existed ("'y_acc' is not a buffer of the
program").  These programs, their gradients and their second derivatives run
compiled and must equal the reference interpreter and finite differences.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from compare import assert_matches_interpreter

COLUMN_MAX = "input lg[n, m]\ny[j] = max[i](lg[i, j])\n"
COLUMN_MIN = "input lg[n, m]\ny[j] = min[i](lg[i, j])\n"
# a column reduction beside a row one and a sum, all over inferred ranges
MIXED = """input lg[n, m]
cm[j] = max[i](lg[i, j])
rm[i] = min[j](lg[i, j])
s[j] = sum[i](lg[i, j] - cm[j])
"""


@pytest.mark.parametrize("src", [COLUMN_MAX, COLUMN_MIN, MIXED], ids=["max", "min", "mixed"])
@pytest.mark.parametrize("sizes", [dict(n=5, m=4), dict(n=37, m=41), dict(n=3, m=16), dict(n=0, m=19)],
                         ids=["narrow", "strips-and-rest", "one-strip", "empty-column"])
def test_forward_matches_interpreter(src: str, sizes: dict[str, int]) -> None:
    assert_matches_interpreter(tcc.parse(src), sizes)


@pytest.mark.parametrize("src,dtype", [(COLUMN_MAX, "float64"), (COLUMN_MIN, "float32")], ids=["max", "min-f32"])
def test_compiled_column_reduction_is_numpys(src: str, dtype: str) -> None:
    x = np.random.default_rng(1).standard_normal((23, 35)).astype(dtype)
    got = tcc.compile(tcc.parse(src), dtype=dtype)(lg=x)["y"]
    want = x.max(axis=0) if "max" in src else x.min(axis=0)
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, want)


@pytest.mark.parametrize("src", [COLUMN_MAX, COLUMN_MIN, MIXED], ids=["max", "min", "mixed"])
def test_gradient_compiles_and_matches(src: str) -> None:
    p = tcc.parse(src)
    of = [d.name for d in tcc.transform(p, "infer-ranges").definitions][0]
    g = tcc.grad(p, of=of, wrt=["lg"])
    assert_matches_interpreter(g, dict(n=29, m=33))
    for r in tcc.check(p, of, ["lg"], sizes=dict(n=7, m=18)):
        assert r.ok, r


def test_ties_split_the_gradient_in_compiled_code() -> None:
    """Integer-valued data with repeated column maxima: each tied element gets an equal share."""
    g = tcc.compile(tcc.grad(tcc.parse(COLUMN_MAX), of="y", wrt=["lg"]))
    x = np.array([[1.0, 2.0] * 9, [1.0, 0.0] * 9, [0.0, 2.0] * 9])  # 3 x 18: strips and a remainder
    dy = np.ones(18)
    dlg = g(lg=x, dy=dy)["dlg"]
    want = (x == x.max(axis=0)) / (x == x.max(axis=0)).sum(axis=0)
    assert np.array_equal(dlg, want)
