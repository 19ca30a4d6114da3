# jvp of the Urban example w.r.t. d: the chain rule through exp re-uses f.
# RUN: tcc jvp %s --of f --wrt d
input  a[3, 5], b[4, 5], c[3, 3], d[8]
output f[3, 4]
f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
# CHECK: input a[3, 5], b[4, 5], c[3, 3], d[8], dd[8]
# CHECK-NEXT: output df[3, 4]
# CHECK-NEXT: local f[3, 4]
# CHECK: df[i, j] = -sum[k: 0..4](dd[i + k] * 3 * d[i + k]**2) * f[i, j]
