# urban.tcc — the example of section 6 of the Urban paper
input  a[3, 5], b[4, 5], c[3, 3], d[8]
output f[3, 4]
f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
