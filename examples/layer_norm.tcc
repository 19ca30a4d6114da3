# Layer normalisation over the last axis, dividing by its size m (a size used as a value),
# then a leaky ReLU (a value condition).
input X[n, m], g[m], b[m]
local mu[n], xc[n, m], r[n]
output Y[n, m]
mu[a] = sum[c](X[a, c]) / m
xc[a, c] = X[a, c] - mu[a]
r[a] = 1 / sqrt(sum[c](xc[a, c]**2) / m + 1e-05)
Y[a, c] = where(xc[a, c] * r[a] * g[c] + b[c] > 0, xc[a, c] * r[a] * g[c] + b[c], 0.01 * (xc[a, c] * r[a] * g[c] + b[c]))
