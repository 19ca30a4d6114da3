# range-bound: the constrained sum of the strided read becomes a ranged sum with
# max/min bounds (Fourier-Motzkin, eq. 45), rounded with // 3.
# RUN: tcc grad %s --of f --wrt x --dump-before range-bound --dump-after range-bound 2>&1
input x[17]
output f[5, 5]
f[i, j] = exp(x[3*i + j])
# CHECK-LABEL: IR before range-bound
# CHECK: dx[dx_0] = sum[dx_z0 | {{.*}}3*dx_z0 <= dx_0{{.*}}](df[dx_z0, dx_0 - 3*dx_z0] * f[dx_z0, dx_0 - 3*dx_z0])
# CHECK-LABEL: IR after range-bound
# CHECK: dx[dx_0] = sum[dx_z0: max(0, (dx_0 - 2) // 3)..min(4, dx_0 // 3)](df[dx_z0, dx_0 - 3*dx_z0] * f[dx_z0, dx_0 - 3*dx_z0])
# CHECK-NOT: |
