"""Programs of the issue-13 workload families that several test modules compile (tests only).

Templates: ``.format`` them with the extents (``A``, ``C`` for layer
normalisation; ``B``, ``I``, ``J``, ``D`` for attention), numbers or size
names.  The same programs as ``benchmarks/families.py`` builds, there with
the benchmark's sizes.
"""
from __future__ import annotations

#: layer normalisation of X[A, C] over its last axis, with gain g and bias b
LAYERNORM = """input X[{A}, {C}], g[{C}], b[{C}]
local mu[{A}], xc[{A}, {C}], r[{A}]
output Y[{A}, {C}]
mu[a] = sum[c](X[a, c]) / {C}
xc[a, c] = X[a, c] - mu[a]
r[a] = 1 / sqrt(sum[c](xc[a, c]**2) / {C} + 1e-05)
Y[a, c] = xc[a, c] * r[a] * g[c] + b[c]
"""

#: scaled attention scores of Q[B, I, D] against K[B, J, D] and their softmax over j (no max subtracted)
ATTENTION = """input Q[{B}, {I}, {D}], K[{B}, {J}, {D}]
local e[{B}, {I}, {J}], s[{B}, {I}]
output P[{B}, {I}, {J}]
e[b, i, j] = exp(0.125 * sum[d](Q[b, i, d] * K[b, j, d]))
s[b, i] = sum[j](e[b, i, j])
P[b, i, j] = e[b, i, j] / s[b, i]
"""
