# softmax_matmul.tcc — row softmax of a matrix product, in several
# definitions (the products and normalisations of seeds 002 and 004).
# Intermediate definitions that are not results are declared `local`.
input  a[n, p], b[p, m]
local  z[n, m], e[n, m], s[n]
output y[n, m]
z[i, j] = sum[k](a[i, k] * b[k, j])
e[i, j] = exp(z[i, j])
s[i] = sum[j](e[i, j])
y[i, j] = e[i, j] / s[i]
