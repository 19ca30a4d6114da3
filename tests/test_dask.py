"""tcc.dask.compile: block footprints, and programs with their gradients on a LocalCluster.

The footprint tests need no Dask; the rest skip cleanly without it.  One
module-scoped LocalCluster (2 worker processes, 1 thread each) runs every
graph; each test computes all its results in one ``client.compute``.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import tcc
from compare import random_inputs
from tcc.ir.expr import Access, Reduce, Sum, Where
from tcc.ir.footprint import footprint

CORRELATION = "input x[n], w[m]\ny[i] = sum[k](x[i + k] * w[k])\n"
CONV = """input x[b, c, h, w], k[f, c, 3, 3]
y[n, o, i, j] = sum[ci, p, q](x[n, ci, 2*i + p, 2*j + q] * k[o, ci, p, q])
"""
SOFTMAX = """input x[n, m]
local mx[n], z[n]
output p[n, m]
mx[i] = max[j](x[i, j])
z[i] = sum[j](exp(x[i, j] - mx[i]))
p[i, j] = exp(x[i, j] - mx[i]) / z[i]
"""


def _grad(src: object, of: str) -> object:
    p = tcc.parse(src) if isinstance(src, str) else src
    return tcc.grad(p, of=of, wrt=[d.name for d in p.inputs])


# ---------------------------------------------------------------------------
# footprints against brute-force enumeration of the reads
# ---------------------------------------------------------------------------
def _brute(d, sizes, box):  # noqa: ANN001, ANN202
    """Every read of the block, by walking the body at each point (the taken where-branch only)."""
    seen: dict[str, set] = {}

    def walk(e, env):  # noqa: ANN001, ANN202
        if isinstance(e, Access):
            seen.setdefault(e.tensor, set()).add(tuple(int(a.evaluate(env)) for a in e.indices))
        elif isinstance(e, Where):
            walk(e.then if e.cond.evaluate(env) else e.other, env)
        elif isinstance(e, (Sum, Reduce)):
            lo = max(int(a.evaluate(env)) for a in e.lo)
            hi = min(int(a.evaluate(env)) for a in e.hi)
            if e.var in box:
                lo, hi = max(lo, box[e.var][0]), min(hi, box[e.var][1] - 1)
            for v in range(lo, hi + 1):
                walk(e.children()[0], {**env, e.var: v})
        else:
            for c in e.children():
                walk(c, env)

    axes = [range(*box.get(i, (0, int(x.evaluate(sizes))))) for i, x in zip(d.indices, d.extents)]
    for point in itertools.product(*axes):
        walk(d.body, {**sizes, **dict(zip(d.indices, point))})
    return {t: tuple((min(p[a] for p in s), max(p[a] for p in s) + 1) for a in range(len(next(iter(s)))))
            for t, s in seen.items()}


def _boxes(d, sizes):  # noqa: ANN001, ANN202
    """A few blocks of ``d``: a middle slab of each output axis, and each top-level sum's middle slab."""
    out = [{}]
    for i, e in zip(d.indices, d.extents):
        n = int(e.evaluate(sizes))
        out.append({i: (n // 3, max(n // 3 + 1, (2 * n) // 3))})
    body = d.body
    while isinstance(body, Sum):
        out.append({body.var: (1, 3), **(out[1] if len(out) > 1 else {})})
        body = body.body
    return out


@pytest.mark.parametrize("src, of, sizes", [
    (CORRELATION, "y", dict(n=13, m=4)),
    (CONV, "y", dict(b=2, c=2, h=11, w=8, f=2)),
    (SOFTMAX, "p", dict(n=6, m=5)),
])
def test_footprint_equals_brute_force(src: str, of: str, sizes: dict) -> None:
    checked = 0
    for program in (tcc.transform(src), tcc.transform(_grad(src, of))):
        for d in program.definitions:
            for box in _boxes(d, sizes):
                assert footprint(program, d, sizes, box) == _brute(d, sizes, box), (d.name, box)
                checked += 1
    assert checked >= 8


def test_footprint_of_correlation_block_has_the_halo() -> None:
    program = tcc.transform(CORRELATION)
    (d,) = program.definitions
    assert footprint(program, d, dict(n=20, m=4), {"i": (5, 9)}) == {"x": ((5, 12),), "w": ((0, 4),)}
    assert footprint(program, d, dict(n=20, m=4), {"i": (5, 5)}) == {}


def test_footprint_of_strided_conv_rows() -> None:
    program = tcc.transform(CONV)
    (d,) = program.definitions
    got = footprint(program, d, dict(b=3, c=2, h=11, w=8, f=2), {"n": (1, 2), "i": (2, 4)})
    assert got["x"] == ((1, 2), (0, 2), (4, 9), (0, 7))  # column 7 is never read: (8 - 3) // 2 = 2, 2*2 + 2 = 6


# ---------------------------------------------------------------------------
# on a LocalCluster
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():  # noqa: ANN201
    pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                                       dashboard_address=None, memory_limit="1GiB")
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def _block_tasks(array, name: str) -> int:  # noqa: ANN001
    """How many block-kernel tasks of definition ``name`` the graph of ``array`` has (keys tcc-NAME-...)."""
    keys = [k[0] if isinstance(k, tuple) else k for k in dict(array.__dask_graph__())]
    return sum(1 for k in keys if str(k).startswith(f"tcc-{name}-"))


def _compare(client, src, arrays: dict, chunks: dict, dtype: str = "float64") -> dict:  # noqa: ANN001
    import dask.array as da

    ref = tcc.compile(src, dtype=dtype)(**arrays)
    f = tcc.dask.compile(src)
    got = f(**{n: da.from_array(a, chunks=chunks[n]) if n in chunks else a for n, a in arrays.items()})
    assert sorted(got) == sorted(tcc.transform(src).results())
    values = client.compute(got, sync=True)
    for name, v in values.items():
        np.testing.assert_allclose(v, ref[name], rtol=1e-12 if dtype == "float64" else 1e-5, atol=1e-12)
    return got


@pytest.mark.parametrize("xchunks", [(5, 3, 7, 8), -1, 1])
def test_correlation_and_gradients(client, xchunks) -> None:  # noqa: ANN001
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(23), rng.standard_normal(4)
    got = _compare(client, CORRELATION, dict(x=x, w=w), dict(x=xchunks))
    expected = {(5, 3, 7, 8): ((5, 3, 7, 5),), -1: ((20,),), 1: ((1,) * 20,)}[xchunks]
    assert got["y"].chunks == expected
    dy = rng.standard_normal(20)
    dchunks = {(5, 3, 7, 8): (5, 3, 12), -1: -1, 1: 1}[xchunks]
    got = _compare(client, _grad(CORRELATION, "y"), dict(x=x, w=w, dy=dy), dict(x=xchunks, dy=dchunks))
    assert got["dw"].shape == (4,)


def test_strided_conv_chunked_over_batch_and_rows(client) -> None:  # noqa: ANN001
    rng = np.random.default_rng(2)
    x, k = rng.standard_normal((3, 2, 13, 9)), rng.standard_normal((4, 2, 3, 3))
    got = _compare(client, CONV, dict(x=x, k=k), dict(x=(2, 2, (4, 1, 8), 9)))
    assert got["y"].chunks == ((2, 1), (4,), (2, 1, 3), (4,))  # row cuts 4, 5 -> ceil(4/2), ceil(5/2)
    dy = rng.standard_normal((3, 4, 6, 4))
    _compare(client, _grad(CONV, "y"), dict(x=x, k=k, dy=dy), dict(x=(1, 2, 5, 9), dy=(1, 4, 2, 4)))


def test_row_softmax_and_gradient(client) -> None:  # noqa: ANN001
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 5))
    got = _compare(client, SOFTMAX, dict(x=x), dict(x=(3, 5)))
    assert got["p"].chunks == ((3, 3, 1), (5,))
    dp = rng.standard_normal((7, 5))
    _compare(client, _grad(SOFTMAX, "p"), dict(x=x, dp=dp), dict(x=(2, 5), dp=(1, 5)))


def test_sums_off_the_linear_path_are_outlined_and_split(client) -> None:  # noqa: ANN001
    """A softmax chunked along its summed axis: the gradient's sum[k](dp[i, k] * p[i, k]) (beside a
    '+') and a sum under exp become definitions of their own, each split into one partial sum per
    column chunk, instead of every block reading whole rows."""
    rng = np.random.default_rng(5)
    x, dp = rng.standard_normal((6, 7)), rng.standard_normal((6, 7))
    grad = _grad(SOFTMAX, "p")
    f = tcc.dask.compile(grad)
    assert "dx_s0[dx_0] = sum[" in str(f.program) and f.results == ("dx",)
    got = _compare(client, grad, dict(x=x, dp=dp), dict(x=(6, (3, 2, 2)), dp=(6, (3, 2, 2))))
    assert got["dx"].chunks == ((6,), (3, 2, 2))
    assert _block_tasks(got["dx"], "dx_s0") == 3  # a partial sum per column chunk
    src = "input x[n]\ny[i] = exp(sum[k](x[k]) / n - x[i])\n"
    got = _compare(client, src, dict(x=rng.standard_normal(10)), dict(x=(4, 4, 2)))
    assert _block_tasks(got["y"], "y_s0") == 3 and got["y"].chunks == ((4, 4, 2),)


def test_max_and_min_over_a_chunked_axis_are_split(client) -> None:  # noqa: ANN001
    """The softmax's row max over column chunks: a partial max per chunk, combined by max; a min
    under exp is outlined and split too; a NaN in one chunk propagates as in tcc.compile."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 9))
    got = _compare(client, SOFTMAX, dict(x=x), dict(x=(5, (4, 4, 1))))
    assert _block_tasks(got["p"], "mx") == 3 and _block_tasks(got["p"], "z") == 3
    src = "input x[n, m]\nassume m >= 1\ny[i] = exp(min[j](x[i, j])) + x[i, 0]\n"
    x[2, 5] = np.nan
    got = _compare(client, src, dict(x=x), dict(x=(5, (4, 4, 1))))
    assert _block_tasks(got["y"], "y_s0") == 3 and np.isnan(client.compute(got["y"], sync=True)[2])


def test_a_sum_in_bounds_only_under_its_where_stays_inline(client) -> None:  # noqa: ANN001
    src = "input x[n, m]\ny[i] = where(i > 0, exp(sum[k](x[i - 1, k])), 0)\n"
    f = tcc.dask.compile(src)
    assert "_s0" not in str(f.program)
    _compare(client, src, dict(x=np.random.default_rng(6).standard_normal((5, 3))), dict(x=(2, 3)))


def test_float32_and_numpy_inputs_as_one_chunk(client) -> None:  # noqa: ANN001
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal(12).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    got = _compare(client, CORRELATION, dict(x=x, w=w), {}, dtype="float32")
    assert got["y"].dtype == np.float32 and got["y"].chunks == ((10,),)


# ---------------------------------------------------------------------------
# bad calls: the runtime's messages
# ---------------------------------------------------------------------------
def test_bad_dtype_shape_names_and_types() -> None:
    da = pytest.importorskip("dask.array")
    f = tcc.dask.compile(CORRELATION, dtype="float64")
    x = da.ones(10, chunks=3)
    with pytest.raises(tcc.CallError,
                       match=r"^error: input 'w' has dtype float32, but this program was compiled for float64$"):
        f(x=x, w=np.ones(3, np.float32))
    with pytest.raises(tcc.TccError) as got:
        f(x=x, w=np.ones((3, 2)))
    with pytest.raises(tcc.TccError) as ref:
        tcc.compile(CORRELATION)(x=np.ones(10), w=np.ones((3, 2)))
    assert str(got.value) == str(ref.value)
    with pytest.raises(tcc.TccError, match=r"^error: missing input 'w'$"):
        f(x=x)
    with pytest.raises(tcc.TccError, match=r"^error: unknown input 'v' \(inputs: x, w\)$"):
        f(x=x, w=np.ones(3), v=x)
    with pytest.raises(TypeError, match=r"^input 'w' must be a dask.array.Array or a NumPy array, got list$"):
        f(x=x, w=[1.0, 2.0])
    with pytest.raises(tcc.TccError, match=r"^error: the float inputs must all be float64 or all float32"):
        tcc.dask.compile(CORRELATION)(x=x, w=np.ones(3, np.float32))


def test_unknown_chunks_and_index_inputs_are_refused() -> None:
    da = pytest.importorskip("dask.array")
    x = da.ones(10, chunks=3)
    x = x[x > 0]
    with pytest.raises(tcc.TccError,
                       match=r"^error: input 'x' has unknown chunk sizes: call compute_chunk_sizes\(\) on it first$"):
        tcc.dask.compile(CORRELATION)(x=x, w=np.ones(3))
    with pytest.raises(tcc.TccError, match=r"^error: tcc.dask.compile does not support index inputs yet \(tok\)"):
        tcc.dask.compile("input e[v, d]\nindex tok[n] < v\ny[i, j] = e[tok[i], j]\n")


LOSS = """input X[m, n], w[n], t[m]
output loss
loss = sum[i](log(1 + exp(-t[i] * sum[j](X[i, j] * w[j])))) / m
"""


def test_scalar_loss_with_size_as_value_and_its_gradient(client) -> None:  # noqa: ANN001
    rng = np.random.default_rng(5)
    X, w, t = rng.standard_normal((9, 4)), rng.standard_normal(4), rng.standard_normal(9)
    got = _compare(client, LOSS, dict(X=X, w=w, t=t), dict(X=((4, 5), 4), t=3))
    assert got["loss"].shape == ()
    assert _block_tasks(got["loss"], "loss") == 3  # sum[i](...) / m: a partial sum per chunk of t's rows
    got = _compare(client, _grad(LOSS, "loss"), dict(X=X, w=w, t=t, dloss=np.asarray(0.7)),
                   dict(X=(2, 4), t=3))
    assert got["dX"].chunks == ((3, 3, 3), (4,))  # the first chunked read (of t) decides the rows


@pytest.mark.parametrize("example, of", [("urban", "f"), ("layer_norm", "Y"), ("max_pool", "y")])
def test_examples_and_gradients_on_the_synchronous_scheduler(example: str, of: str) -> None:
    """Any scheduler: the same graphs on dask's synchronous one, for examples with several definitions."""
    dask = pytest.importorskip("dask")
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(6)
    source = tcc.parse(f"examples/{example}.tcc")
    for program in (source, _grad(source, of)):
        sizes = {s: 7 for s in tcc.transform(program).sizes()}
        arrays = {d.name: rng.standard_normal(tuple(int(e.evaluate(sizes)) for e in d.extents))
                  for d in tcc.transform(program).inputs}
        ref = tcc.compile(program)(**arrays)
        out = tcc.dask.compile(program)(**{n: da.from_array(a, chunks=tuple(max(1, k // 3) for k in a.shape))
                                           for n, a in arrays.items()})
        assert any(len(c) > 1 for v in out.values() for c in v.chunks)
        with dask.config.set(scheduler="sync"):
            got = dask.compute(out)[0]
        for name, v in got.items():
            np.testing.assert_allclose(v, ref[name], rtol=1e-12, atol=1e-12)


def test_large_sizes_bind_through_zero_element_arrays(client) -> None:  # noqa: ANN001
    """Sizes and offsets whose product passes 2**63 (one (0, n, m, o, ...) array would be refused by NumPy)."""
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal(200_000), rng.standard_normal(5)
    got = _compare(client, CORRELATION, dict(x=x, w=w), dict(x=50_000))
    assert got["y"].chunks == ((50_000,) * 3 + (49_996,),)


def test_split_sum_next_to_a_sum_over_the_same_name(client) -> None:  # noqa: ANN001
    """Only the split sum is clipped: the other sum over ``i`` still reads all of ``y``."""
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal(10), rng.standard_normal(10)
    src = "input x[n], y[n]\nf = -(sum[i](x[i]) * sum[i](y[i] * y[i])) / n\n"
    got = _compare(client, src, dict(x=x, y=y), dict(x=4, y=3))
    assert _block_tasks(got["f"], "f") == 3


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.tcc")),
                         ids=lambda p: p.stem)
def test_every_example_and_its_gradients_equal_tcc_compile(path: Path) -> None:
    """Every example without index inputs, and the gradient of each of its results w.r.t. every input,
    on inputs chunked in halves along every axis (synchronous scheduler), against tcc.compile."""
    dask = pytest.importorskip("dask")
    import dask.array as da

    src = path.read_text(encoding="utf-8")
    program = tcc.transform(src)
    if any(d.is_index for d in program.inputs):
        with pytest.raises(tcc.TccError, match=r"does not support index inputs yet"):
            tcc.dask.compile(src)
        return
    programs = [src] + [tcc.grad(src, of=r, wrt=[d.name for d in program.inputs]) for r in program.results()]
    for prog in programs:
        arrays = random_inputs(tcc.transform(prog), seed=1)
        want = tcc.compile(prog)(**arrays)
        chunked = {n: da.from_array(a, chunks=tuple(max(1, (s + 1) // 2) for s in a.shape)) for n, a in arrays.items()}
        (got,) = dask.compute(tcc.dask.compile(prog)(**chunked), scheduler="synchronous")
        assert sorted(got) == sorted(tcc.transform(prog).results())  # tcc.compile returns locals too
        for name, value in got.items():
            np.testing.assert_allclose(value, want[name], rtol=1e-10, atol=1e-10, err_msg=f"{path.stem}: {name}")
