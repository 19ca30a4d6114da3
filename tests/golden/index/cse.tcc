# cse: tanh(x*x) occurs twice and depends on dx_0 only: one local dx_t[n].
# RUN: tcc grad %s --of f --wrt x --dump-after simplify,cse 2>&1
input x[n], y[m]
f[i, j] = tanh(x[i] * x[i]) * y[j] + tanh(x[i] * x[i])**2 * y[j]**2
# CHECK-LABEL: IR after simplify
# CHECK: dx[dx_0] = sum[dx_z0: 0..m - 1](2 * ((df[dx_0, dx_z0] * y[dx_z0]**2 * 2 * tanh(x[dx_0] * x[dx_0]) + df[dx_0, dx_z0] * y[dx_z0]) * (1 - tanh(x[dx_0] * x[dx_0])**2) * x[dx_0]))
# CHECK-LABEL: IR after cse
# CHECK: local dx_t[n]
# CHECK-NEXT: dx_t[dx_0] = tanh(x[dx_0] * x[dx_0])
# CHECK-NEXT: dx[dx_0] = sum[dx_z0: 0..m - 1](2 * ((df[dx_0, dx_z0] * y[dx_z0]**2 * 2 * dx_t[dx_0] + df[dx_0, dx_z0] * y[dx_z0]) * (1 - dx_t[dx_0]**2) * x[dx_0]))
# CHECK-NOT: tanh(x[dx_0] * x[dx_0])**2
