# diagonal_square.tcc — Urban & van der Smagt, sec. 1: f_i(x) = x_ii**2.
# The derivative needs a Kronecker delta: dx_ij = delta_ij * df_i * 2 x_ii.
input  x[n, n]
f[i] = x[i, i]**2
