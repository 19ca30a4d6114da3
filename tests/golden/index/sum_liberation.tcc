# sum-liberation: the delta-form term becomes one constrained sum, the where gone.
# RUN: tcc grad %s --of f --wrt x --dump-before sum-liberation --dump-after sum-liberation 2>&1
input x[10]
output f[5]
f[i] = x[2*i]**2
# CHECK-LABEL: IR before sum-liberation
# CHECK: dx[dx_0] = sum[i: 0..4](where(2*i == dx_0, df[i] * 2 * x[2*i]**(2 - 1), 0))
# CHECK-LABEL: IR after sum-liberation
# CHECK: dx[dx_0] = sum[i | 0 <= i, i <= 4, 2*i == dx_0](df[i] * 2 * x[2*i]**(2 - 1))
# CHECK-NOT: where(2*i == dx_0
