# jvp (forward mode) of f = x^T A x: the tangent is dx^T A x + x^T A dx.
# RUN: tcc jvp %s --of f --wrt x
input x[n], A[n, n]
f = sum[i](sum[j](x[i] * A[i, j] * x[j]))
# CHECK: input x[n], A[n, n], dx[n]
# CHECK-NEXT: output df
# CHECK-NEXT: df = sum[i: 0..n - 1, j: 0..n - 1](dx[i] * A[i, j] * x[j] + dx[j] * (x[i] * A[i, j]))
