# index-solve: the Smith normal form of 2*i == dx_0 (S = (2)): dx_0 must be even
# and i = dx_0 // 2; the constrained sum is gone.
# RUN: tcc grad %s --of f --wrt x --dump-after index-solve 2>&1
input x[10]
output f[5]
f[i] = x[2*i]**2
# CHECK-LABEL: IR after index-solve
# CHECK-NOT: sum[
# CHECK: dx[dx_0] = where(dx_0 % 2 == 0 and dx_0 // 2 >= 0 and dx_0 // 2 <= 4, df[dx_0 // 2] * 2 * x[2*(dx_0 // 2)]**(2 - 1), 0)
