# logistic_regression.tcc — Laue, Mitterreiter, Giesen (sec. 4):
# the logistic-regression loss  sum_i log(1 + exp(-y_i (X w)_i))  for m
# examples with n features and labels y_i in {-1, +1}, in index notation.
input X[m, n], w[n], y[m]
output f
local z[m]
z[i] = y[i] * sum[j](X[i, j] * w[j])
f = sum[i](log(1 + exp(-z[i])))
# factor-linear: in the Hessian w.r.t. w, dz2 is linear in ddz (full rank, n x m):
# it becomes ddz times a coefficient dz2_c[m], and the monomial ddz is inlined.
# RUN: tcc hessian %s --of f --wrt w --dump-before factor-linear --dump-after factor-linear 2>&1
# CHECK-LABEL: IR before factor-linear
# CHECK-LABEL: IR before factor-linear
# CHECK: ddz[ddw_0, ddz_0] = X[ddz_0, ddw_0] * y[ddz_0]
# CHECK: dz2[ddw_0, dz2_0] =
# CHECK-LABEL: IR after factor-linear
# CHECK-NOT: ddz[
# CHECK-NOT: dz2[
# CHECK: dz2_c[dz2_0] = -((-(1 / (1 + exp(-z[dz2_0]))) + -(-exp(-z[dz2_0]) / (1 + exp(-z[dz2_0]))**2)) * exp(-z[dz2_0]))
# CHECK: dw2[ddw_0, dw2_0] = sum[dw2_z0: 0..m - 1](X[dw2_z0, ddw_0] * y[dw2_z0] * dz2_c[dw2_z0] * y[dw2_z0] * X[dw2_z0, dw2_0])
