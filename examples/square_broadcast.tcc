# square_broadcast.tcc — Urban & van der Smagt, sec. 1 (and sec. 5.1):
# f_ij(x) = x_i**2.  Index j does not appear in x, so the derivative sums over it:
# dx_i = sum_j df_ij * 2 x_i.
input  x[n]
output f[n, 4]
f[i, j] = x[i]**2
