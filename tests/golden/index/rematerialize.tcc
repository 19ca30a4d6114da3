# rematerialize: the cheap element-wise local xc (read injectively) is recomputed
# in its reader instead of stored, and its declaration goes.
# RUN: tcc compile %s --passes infer-ranges,rematerialize
input X[n, m], mu[n]
local xc[n, m]
xc[a, c] = X[a, c] - mu[a]
output r[n]
r[a] = sum[c](xc[a, c] * xc[a, c])
# CHECK: input X[n, m], mu[n]
# CHECK-NEXT: output r[n]
# CHECK-NOT: xc
# CHECK: r[a] = sum[c: 0..m - 1]((X[a, c] - mu[a]) * (X[a, c] - mu[a]))
