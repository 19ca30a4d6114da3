# matrix_factorization.tcc — Laue, Mitterreiter, Giesen (sec. 4):
# matrix factorization with missing entries,  || M .* (T - U V^T) ||_F^2,
# where the 0/1 mask M marks the observed entries of T; rank r.
input T[m, n], M[m, n], U[m, r], V[n, r]
output f
local R[m, n]
R[i, j] = M[i, j] * (T[i, j] - sum[k](U[i, k] * V[j, k]))
f = sum[i, j](R[i, j]**2)
