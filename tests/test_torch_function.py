"""``tcc.torch.function``: tcc programs inside ``torch.autograd``.

gradcheck and gradgradcheck on every example with float64 inputs (the
backward runs tcc's compiled VJP program, the second backward its
second-order program), index inputs as integer tensors, zero-copy views on
the CPU, float32, errors, and a training loop.  Skipped where PyTorch is not
installed (it is the optional ``torch`` extra).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tcc
from compare import random_inputs
from tcc.ir.diagnostics import TccError

torch = pytest.importorskip("torch")
import tcc.torch as tt  # noqa: E402

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.tcc"))


def tensors(program, seed: int = 0, requires_grad: bool = True) -> dict:
    arrays = random_inputs(tcc.transform(program), seed=seed)
    return {k: torch.from_numpy(v).requires_grad_(requires_grad and v.dtype.kind == "f") for k, v in arrays.items()}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_gradcheck_and_gradgradcheck_on_every_example(path: Path) -> None:
    f = tt.function(str(path))
    args = tensors(tcc.parse(path))
    names = list(args)
    floats = [n for n in names if args[n].dtype.is_floating_point]

    def call(*xs):
        full = dict(args)
        full.update(zip(floats, xs))
        out = f(**full)
        return tuple(out[r] for r in f.results)

    xs = tuple(args[n] for n in floats)
    assert torch.autograd.gradcheck(call, xs, atol=1e-6, rtol=1e-5)
    assert torch.autograd.gradgradcheck(call, xs, atol=1e-5, rtol=1e-4)


def test_results_and_inputs_share_memory_with_the_tensors() -> None:
    f = tt.function("input x[n]\ny[i] = 2 * x[i]\n")
    x = torch.arange(5, dtype=torch.float64)
    out = f(x=x)["y"]
    assert torch.equal(out, 2 * x) and out.dtype == torch.float64
    seen = {}
    real = f.compiled("float64")

    def spy(**arrays):
        seen.update(arrays)
        return real(**arrays)

    f._compiled["float64"] = spy
    f(x=x)
    assert seen["x"].ctypes.data == x.data_ptr()          # the tensor's memory, not a copy
    assert f(x=x[::2])["y"].tolist() == [0.0, 4.0, 8.0]   # a strided view is made contiguous first


def test_index_tensors_float32_and_gradients_against_add_at() -> None:
    f = tt.function(open(Path(__file__).resolve().parent.parent / "examples" / "embedding.tcc").read())
    tok = torch.tensor([3, 0, 3, 1], dtype=torch.int32)
    for dtype in (torch.float64, torch.float32):
        emb = torch.rand(5, 2, dtype=dtype, requires_grad=True)
        y = f(tok=tok, emb=emb)["y"]
        assert y.dtype == dtype and torch.equal(y, emb.detach()[tok.long()])
        dy = torch.rand(4, 2, dtype=dtype)
        (demb,) = torch.autograd.grad(y, emb, dy)
        want = np.zeros((5, 2), dtype=np.float64)
        np.add.at(want, tok.numpy(), dy.double().numpy())
        np.testing.assert_allclose(demb.double().numpy(), want, rtol=1e-6)


def test_bad_calls_are_refused_clearly() -> None:
    f = tt.function("input x[n], w[n]\ny = sum[i](x[i] * w[i])\n")
    x = torch.rand(3, dtype=torch.float64)
    with pytest.raises(TccError, match=r"missing input 'w'"):
        f(x=x)
    with pytest.raises(TccError, match=r"unknown input 'z' \(inputs: x, w\)"):
        f(x=x, w=x, z=x)
    with pytest.raises(TypeError, match=r"input 'w' must be a torch.Tensor, got ndarray"):
        f(x=x, w=np.ones(3))
    with pytest.raises(TccError, match=r"must all be float64 or all float32 \(got float32, float64\)"):
        f(x=x, w=x.float())
    with pytest.raises(ValueError, match=r"supports the targets 'cpu', 'cuda-sim' and 'cuda', not 'gpu'"):
        tt.function("input x[n]\ny[i] = x[i]\n", target="gpu")
    meta = torch.empty(3, dtype=torch.float64, device="meta")
    with pytest.raises(TccError, match=r"input 'x' is on meta: the target 'cpu' runs CPU tensors \(target='cuda' "):
        f(x=meta, w=x)
    g = tt.function("input x[n], w[n]\ny = sum[i](x[i] * w[i])\n", target="cuda")
    with pytest.raises(TccError, match=r"the inputs are on several devices \(cpu, meta\): put them on one device"):
        g(x=x, w=meta)
    with pytest.raises(TccError, match=r"input 'x' is on meta: the target 'cuda' takes CUDA or CPU tensors"):
        g(x=meta, w=meta)
    assert tcc.torch.function is tt.function                # tcc.torch without an explicit import


def test_cuda_sim_target_and_every_result_differentiable() -> None:
    src = "input x[n]\noutput s, p[n]\ns = sum[i](x[i] ** 2)\np[i] = x[i] * s\n"
    f = tt.function(src, target="cuda-sim")
    x = torch.rand(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: tuple(f(x=x).values()), (x,))


@pytest.mark.parametrize("block", range(2))
def test_the_examples_of_docs_integration_run(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "integration.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    blocks = [b for b in blocks if "import torch\n" in b]  # the JAX section's blocks run in test_jax_function.py
    assert len(blocks) == 2
    monkeypatch.chdir(root)
    exec(compile(blocks[block], f"docs/integration.md block {block}", "exec"), {})


def test_cuda_target_through_the_pycuda_double(monkeypatch: pytest.MonkeyPatch) -> None:
    """target='cuda' end to end without a GPU: PyCUDA's test double runs the PTX kernels as their
    cuda-sim twins; CPU tensors go to the device and back.  gradcheck and gradgradcheck pass, and the
    forward, first- and second-order programs each launch kernels."""
    from fake_pycuda import FakeCUDA

    fake = FakeCUDA(sms=2).install(monkeypatch)
    plain = tcc.compile

    def announced(program, target="cpu", **options):  # the double runs only programs announced to it
        if target == "cuda" and fake._announced is None:
            return fake.compile(program, **options)
        return plain(program, target, **options)

    monkeypatch.setattr(tcc, "compile", announced)
    src = (Path(__file__).resolve().parent.parent / "examples" / "urban.tcc").read_text(encoding="utf-8")
    f = tt.function(src, target="cuda")
    inputs = tensors(src)
    want = tcc.compile(src)(**{k: v.detach().numpy() for k, v in inputs.items()})["f"]
    got = f(**inputs)["f"]
    assert isinstance(got, torch.Tensor) and np.allclose(got.detach().numpy(), want, rtol=1e-12, atol=0)
    names = list(inputs)
    launched = len(fake.launches)
    assert launched > 0
    assert torch.autograd.gradcheck(lambda *t: f(**dict(zip(names, t)))["f"], tuple(inputs.values()))
    assert torch.autograd.gradgradcheck(lambda *t: f(**dict(zip(names, t)))["f"], tuple(inputs.values()))
    assert len(fake.launches) > launched and not fake.pending and not fake.violations
