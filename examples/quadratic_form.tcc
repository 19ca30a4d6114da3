# quadratic_form.tcc — Laue, Mitterreiter, Giesen, the first
# benchmark problem: f(x) = x^T A x with symbolic n.
# df/dx = (A + A^T) x,  df/dA = x x^T.
input x[n], A[n, n]
f = sum[i](sum[j](x[i] * A[i, j] * x[j]))
