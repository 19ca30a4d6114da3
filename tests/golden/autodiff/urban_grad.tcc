# The Urban paper's sec. 6 example: the four gradients tcc grad prints (README.md).
# The forward value f is kept as a local and re-used by every gradient (cse);
# c is read only on its diagonal, so dc is a where on dc_0 == dc_1; d is read
# at i + k, so dd's sum over the liberated index is clipped by max/min bounds.
# RUN: tcc grad %s --of f --wrt a,b,c,d
input  a[3, 5], b[4, 5], c[3, 3], d[8]
output f[3, 4]
f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
# CHECK: input a[3, 5], b[4, 5], c[3, 3], d[8], df[3, 4]
# CHECK-NEXT: output da[3, 5], db[4, 5], dc[3, 3], dd[8]
# CHECK-NEXT: local f[3, 4]
# CHECK-NEXT: f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
# CHECK-NEXT: da[da_0, da_1] = sum[da_z0: 0..3](-(df[da_0, da_z0] * f[da_0, da_z0]) * (c[da_0, da_0] * 2 * (a[da_0, da_1] + b[da_z0, da_1])))
# CHECK-NEXT: db[db_0, db_1] = sum[db_z0: 0..2](-(df[db_z0, db_0] * f[db_z0, db_0]) * (c[db_z0, db_z0] * 2 * (a[db_z0, db_1] + b[db_0, db_1])))
# CHECK-NEXT: dc[dc_0, dc_1] = where(dc_0 == dc_1, sum[dc_z1: 0..4, dc_z0: 0..3](-(df[dc_0, dc_z0] * f[dc_0, dc_z0]) * (a[dc_0, dc_z1] + b[dc_z0, dc_z1])**2), 0)
# CHECK-NEXT: dd[dd_0] = sum[dd_z1: max(dd_0 - 2, 0)..min(dd_0, 4), dd_z0: 0..3](-(df[dd_0 - dd_z1, dd_z0] * f[dd_0 - dd_z1, dd_z0]) * (3 * d[dd_0]**2))
# CHECK-NOT: {{.}}
