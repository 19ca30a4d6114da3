# scale_rows.tcc — Urban & van der Smagt, sec. 5.1: f_ij(x, y) = x_i * y_ij.
# x is broadcast along j (its derivative sums over j); y is read 1:1.
input  x[n], y[n, m]
f[i, j] = x[i] * y[i, j]
