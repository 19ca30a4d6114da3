# 2x2 max pooling with stride 2 (the extents n // 2, m // 2 are inferred).
# At ties the gradient is split equally between the tied inputs, as in JAX and PyTorch.
input x[n, m]
y[i, j] = max(x[2*i, 2*j], x[2*i + 1, 2*j], x[2*i, 2*j + 1], x[2*i + 1, 2*j + 1])
