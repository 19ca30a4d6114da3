"""``tcc.jax.function``: tcc programs inside ``jax.grad``, ``jax.jit`` and ``jax.vmap``.

``check_grads`` (reverse mode, orders 1 and 2) on every example with float64
inputs (the backward runs tcc's compiled VJP program, the second backward its
second-order program), values against ``tcc.compile``, index inputs as
integer arrays, jit, vmap (a loop of callbacks), float32, errors, and the
docs' training loop.  Skipped where JAX is not installed (the optional
``jax`` extra).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tcc
from compare import random_inputs
from tcc.ir.diagnostics import TccError

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import tcc.jax as tj  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.tcc"))


@pytest.fixture
def x64(request: pytest.FixtureRequest):
    """JAX's 64-bit mode on (``True``) or off for one test, restored afterwards."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", getattr(request, "param", True))
    yield
    jax.config.update("jax_enable_x64", before)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_check_grads_order_1_and_2_on_every_example(path: Path, x64: None) -> None:
    f = tj.function(str(path))
    arrays = random_inputs(tcc.transform(tcc.parse(path)), seed=0)
    want = tcc.compile(tcc.parse(path))(**arrays)
    args = {k: jnp.asarray(v) for k, v in arrays.items()}
    got = f(**args)
    assert list(got) == list(f.results)
    for name, value in got.items():
        assert value.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(value), want[name], rtol=1e-12, atol=1e-12)
    floats = [n for n in f.inputs if n not in f.index_inputs]

    def call(*xs):
        full = dict(args)
        full.update(zip(floats, xs))
        out = f(**full)
        return tuple(out[r] for r in f.results)

    check_grads(call, tuple(args[n] for n in floats), order=2, modes=["rev"], atol=1e-5, rtol=1e-5)


def test_jit_grad_and_hessian_vector_product(x64: None) -> None:
    f = tj.function("input x[n], A[n, n]\nf = sum[i](sum[j](x[i] * A[i, j] * x[j]))\n")
    rng = np.random.default_rng(1)
    A, x, v = (jnp.asarray(a) for a in (rng.random((4, 4)), rng.random(4), rng.random(4)))
    loss = lambda x: f(x=x, A=A)["f"]  # noqa: E731
    g = jax.jit(jax.grad(loss))(x)
    np.testing.assert_allclose(g, (A + A.T) @ x, rtol=1e-12)
    hv = jax.jit(lambda x: jax.grad(lambda y: jnp.vdot(jax.grad(loss)(y), v))(x))(x)
    np.testing.assert_allclose(hv, (A + A.T) @ v, rtol=1e-12)


def test_vmap_loops_over_the_batch_and_matches_the_compiled_program(x64: None) -> None:
    src = "input x[n], w[n]\noutput s, p[n]\ns = sum[i](x[i] * w[i])\np[i] = x[i] * s\n"
    f = tj.function(src)
    rng = np.random.default_rng(2)
    xs, w = rng.random((3, 5)), rng.random(5)
    got = jax.jit(jax.vmap(lambda x: f(x=x, w=jnp.asarray(w))))(jnp.asarray(xs))
    compiled = tcc.compile(src)
    for b in range(3):
        want = compiled(x=xs[b], w=w)
        np.testing.assert_allclose(got["s"][b], want["s"], rtol=1e-12)
        np.testing.assert_allclose(got["p"][b], want["p"], rtol=1e-12)
    grads = jax.vmap(jax.grad(lambda x: f(x=x, w=jnp.asarray(w))["s"]))(jnp.asarray(xs))
    np.testing.assert_allclose(grads, np.broadcast_to(w, (3, 5)), rtol=1e-12)
    shapes = []
    host = f.host
    f.host = lambda dtype, arrays: shapes.append([a.shape for a in arrays]) or host(dtype, arrays)
    jax.block_until_ready(jax.vmap(lambda x: f(x=x, w=jnp.asarray(w)))(jnp.asarray(xs)))
    assert shapes == [[(5,), (5,)]] * 3  # vmap_method="sequential": one call per batch element


def test_only_the_results_with_a_cotangent_and_the_perturbed_inputs_are_differentiated(x64: None) -> None:
    f = tj.function("input x[n], w[n]\noutput s, p[n]\ns = sum[i](x[i] * w[i])\np[i] = x[i] * s\n")
    x, w = jnp.arange(1.0, 4.0), jnp.full(3, 0.5)
    g = jax.grad(lambda x: f(x=x, w=w)["s"])(x)
    np.testing.assert_allclose(g, w)
    assert list(f._derivatives) == [("s", ("x",))]  # no VJP of p, no gradient for w


@pytest.mark.parametrize("x64", [False], indirect=True)
def test_index_inputs_float32_and_gradients_against_add_at(x64: None) -> None:
    f = tj.function(str(ROOT / "examples" / "embedding.tcc"))
    tok = jnp.asarray([3, 0, 3, 1], dtype=jnp.int32)
    emb = jnp.asarray(np.random.default_rng(3).random((5, 2)), dtype=jnp.float32)
    y = jax.jit(lambda emb: f(tok=tok, emb=emb)["y"])(emb)
    assert y.dtype == jnp.float32 and np.array_equal(y, np.asarray(emb)[np.asarray(tok)])
    dy = jnp.asarray(np.random.default_rng(4).random((4, 2)), dtype=jnp.float32)
    _, pullback = jax.vjp(lambda emb: f(tok=tok, emb=emb)["y"], emb)
    (demb,) = pullback(dy)
    want = np.zeros((5, 2))
    np.add.at(want, np.asarray(tok), np.asarray(dy, dtype=np.float64))
    assert demb.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(demb, dtype=np.float64), want, rtol=1e-6)


def test_bad_calls_are_refused_clearly(x64: None) -> None:
    f = tj.function("input x[n], w[n]\ny = sum[i](x[i] * w[i])\n")
    x = jnp.ones(3)
    with pytest.raises(TccError, match=r"^error: missing input 'w'$"):
        f(x=x)
    with pytest.raises(TccError, match=r"^error: unknown input 'z' \(inputs: x, w\)$"):
        f(x=x, w=x, z=x)
    with pytest.raises(TypeError, match=r"^input 'w' must be a jax.Array or a NumPy array, got list$"):
        f(x=x, w=[1.0, 2.0, 3.0])
    with pytest.raises(TccError, match=r"^error: the float inputs must all be float64 or all float32 \(got float32, float64\); "
                                       r"or give dtype= to tcc.jax.function$"):
        f(x=x, w=x.astype(jnp.float32))
    with pytest.raises(TccError, match=r"^error: size 'n' is bound to 3 by 'x' but 'w' implies 4$"):
        f(x=x, w=jnp.ones(4))
    with pytest.raises(TccError, match=r"^error: input 'x' has dtype float64, but this tcc.jax.function runs float32$"):
        tj.function("input x[n]\ny[i] = x[i]\n", dtype="float32")(x=x)
    with pytest.raises(ValueError, match=r"^dtype must be float64, float32 or None \(that of the inputs\), not 'int32'$"):
        tj.function("input x[n]\ny[i] = x[i]\n", dtype=np.int32)
    emb = tj.function(str(ROOT / "examples" / "embedding.tcc"))
    with pytest.raises(TccError, match=r"^error: index input 'tok' must be an integer array \(int64 or int32\), got dtype float64$"):
        emb(tok=jnp.zeros(2), emb=jnp.ones((3, 2)))
    # an index value is only seen by the compiled program, inside the callback: JAX re-raises tcc's message
    with pytest.raises(Exception, match=r"index input 'tok' has tok\[1\] = 7, outside its declared range 0\.\.2"):
        jax.block_until_ready(emb(tok=jnp.asarray([0, 7]), emb=jnp.ones((3, 2)))["y"])
    assert tcc.jax.function is tj.function  # tcc.jax without an explicit import


@pytest.mark.parametrize("x64", [False], indirect=True)
def test_float64_without_x64_is_refused(x64: None) -> None:
    f = tj.function("input x[n]\ny[i] = 2 * x[i]\n", dtype="float64")
    with pytest.raises(TccError, match=r"^error: float64 needs JAX's 64-bit mode: "
                                       r"jax.config.update\(\"jax_enable_x64\", True\) before making arrays"):
        f(x=jnp.ones(3))
    g = tj.function("input x[n]\ny[i] = 2 * x[i]\n")
    with pytest.raises(TccError, match=r"^error: float64 needs JAX's 64-bit mode"):
        g(x=np.ones(3))  # a NumPy float64 array: JAX would make it float32 without a word
    assert g(x=jnp.ones(3))["y"].dtype == jnp.float32


@pytest.mark.parametrize("block", range(2))
def test_the_jax_examples_of_docs_integration_run(block: int, monkeypatch: pytest.MonkeyPatch, x64: None) -> None:
    text = (ROOT / "docs" / "integration.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    blocks = [b for b in blocks if "import jax\n" in b]
    assert len(blocks) == 2
    monkeypatch.chdir(ROOT)
    exec(compile(blocks[block], f"docs/integration.md jax block {block}", "exec"), {})
