# matmul.tcc — Urban & van der Smagt, sec. 5.2 (sum liberation):
# f_ij = sum_k a_ik b_kj.  The sum over k becomes a free index of the
# derivatives: da = df b^T, db = a^T df.
input  a[n, p], b[p, m]
f[i, j] = sum[k](a[i, k] * b[k, j])
