# autodiff (reverse mode) alone: the delta form of eq. 40 before sum-liberation.
# The read d[i + k] gives where(i + k == dd_0, ...) inside the sums over i, j, k.
# RUN: tcc grad %s --of f --wrt d --passes infer-ranges,autodiff
input  a[3, 5], b[4, 5], c[3, 3], d[8]
output f[3, 4]
f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
# CHECK: input a[3, 5], b[4, 5], c[3, 3], d[8], df[3, 4]
# CHECK-NEXT: output dd[8]
# CHECK-NEXT: local f[3, 4]
# CHECK: dd[dd_0] = sum[i: 0..2, j: 0..3](-(df[i, j] * f[i, j]) * sum[k: 0..4](where(i + k == dd_0, 3 * d[i + k]**(3 - 1), 0)))
