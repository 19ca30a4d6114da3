# matrix_factorization.tcc — Laue, Mitterreiter, Giesen (sec. 4):
# matrix factorization with missing entries,  || M .* (T - U V^T) ||_F^2,
# where the 0/1 mask M marks the observed entries of T; rank r.
input T[m, n], M[m, n], U[m, r], V[n, r]
output f
local R[m, n]
R[i, j] = M[i, j] * (T[i, j] - sum[k](U[i, k] * V[j, k]))
f = sum[i, j](R[i, j]**2)
# inline-guards: the second stage of the Hessian w.r.t. U has the delta-shaped
# local dR (a where on dR_0 == ddU_0); inlined, its guard reaches dU2 and the
# m x r x m x n local is gone.
# RUN: tcc hessian %s --of f --wrt U --dump-before inline-guards --dump-after inline-guards 2>&1
# CHECK-LABEL: IR before inline-guards
# CHECK-LABEL: IR before inline-guards
# CHECK: local dR[m, r, m, n]
# CHECK-NEXT: dR[ddU_0, ddU_1, dR_0, dR_1] = where(dR_0 == ddU_0, -V[dR_1, ddU_1] * M[ddU_0, dR_1] * 2, 0)
# CHECK-NEXT: dU2[ddU_0, ddU_1, dU2_0, dU2_1] = sum[dU2_z0: 0..n - 1](-(dR[ddU_0, ddU_1, dU2_0, dU2_z0] * M[dU2_0, dU2_z0]) * V[dU2_z0, dU2_1])
# CHECK-LABEL: IR after inline-guards
# CHECK: output dU2[m, r, m, r]
# CHECK-NOT: dR[
# CHECK: dU2[ddU_0, ddU_1, dU2_0, dU2_1] = where(dU2_0 == ddU_0, sum[dU2_z0: 0..n - 1](-(-V[dU2_z0, ddU_1] * M[ddU_0, dU2_z0] * 2 * M[dU2_0, dU2_z0]) * V[dU2_z0, dU2_1]), 0)
