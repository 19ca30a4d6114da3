# The L1 printer and parser are inverses: the Urban gradient w.r.t. d, as tcc
# grad prints it, parses back and prints the same text (no pass changes it).
# RUN: tcc compile %s --passes infer-ranges
input a[3, 5], b[4, 5], c[3, 3], d[8], df[3, 4]
output dd[8]
local f[3, 4]
f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
dd[dd_0] = sum[dd_z1: max(dd_0 - 2, 0)..min(dd_0, 4), dd_z0: 0..3](-(df[dd_0 - dd_z1, dd_z0] * f[dd_0 - dd_z1, dd_z0]) * (3 * d[dd_0]**2))
# CHECK: input a[3, 5], b[4, 5], c[3, 3], d[8], df[3, 4]
# CHECK-NEXT: output dd[8]
# CHECK-NEXT: local f[3, 4]
# CHECK-NEXT: f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
# CHECK-NEXT: dd[dd_0] = sum[dd_z1: max(dd_0 - 2, 0)..min(dd_0, 4), dd_z0: 0..3](-(df[dd_0 - dd_z1, dd_z0] * f[dd_0 - dd_z1, dd_z0]) * (3 * d[dd_0]**2))
# CHECK-NOT: {{.}}
