# exp_shift.tcc — Urban & van der Smagt, sec. 1: f_ij(x) = exp(x_{i+j}).
# The derivative is dx_k = sum_i df_{i,k-i} exp(x_k) with a k-dependent range
# of i (max/min bounds from Fourier–Motzkin).
input  x[8]
output f[4, 5]
f[i, j] = exp(x[i + j])
