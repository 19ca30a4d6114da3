# diagonal_cube.tcc — Urban & van der Smagt, sec. 5.1: a rank-3 tensor read on
# its diagonal, f_i(x) = x_iii**3.  A = (1, 1, 1)^T has a two-dimensional
# cokernel, so the delta becomes two equality conditions.
input  x[n, n, n]
f[i] = x[i, i, i]**3
