"""The strided NCHW convolution that tests/test_col2im.py and tests/test_im2col.py differentiate (tests only)."""
from __future__ import annotations

import numpy as np

import tcc

CONV = ("input x[{B}, {C}, {S}, {T}], w[{O}, {C}, {R}, {Q}]\n"
        "y[b, o, i, j] = sum[c, p, q](x[b, c, {s}*i + p{pad}, {t}*j + q{pad}] * w[o, c, p, q])\n")


def conv(B=2, C=16, O=16, S=12, T=13, R=3, Q=3, s=2, t=2, pad="") -> str:  # noqa: N803 - the usual names
    """Batch B, C -> O channels, S x T images, R x Q kernels, strides s and t, ``pad`` added to both reads."""
    return CONV.format(B=B, C=C, O=O, S=S, T=T, R=R, Q=Q, s=s, t=t, pad=pad)


def args_for(program, seed: int = 0, dtype=np.float64, sizes=None) -> dict[str, np.ndarray]:  # noqa: ANN001
    """Random inputs for every input of ``program`` (its size names bound by ``sizes``)."""
    rng = np.random.default_rng(seed)
    p = tcc.parse(program) if isinstance(program, str) else program
    env = dict(sizes or {})
    return {t.name: rng.standard_normal(tuple(int(e.evaluate(env)) for e in t.extents)).astype(dtype)
            for t in p.inputs}


def assert_agrees(f, program, args, name: str, tol: float = 1e-11) -> None:  # noqa: ANN001
    """The compiled ``f``'s ``name`` against the reference interpreter's on ``program``."""
    np.testing.assert_allclose(f(**args)[name], tcc.run(program, args)[name], rtol=1e-12, atol=tol)
