# The sum over k of a matrix product becomes a free index of the derivatives
# (sec. 5.2): da = df b^T, db = a^T df.
# RUN: tcc grad %s --of f --wrt a,b
input  a[n, p], b[p, m]
f[i, j] = sum[k](a[i, k] * b[k, j])
# CHECK: input a[n, p], b[p, m], df[n, m]
# CHECK-NEXT: output da[n, p], db[p, m]
# CHECK-NEXT: da[da_0, da_1] = sum[da_z0: 0..m - 1](df[da_0, da_z0] * b[da_1, da_z0])
# CHECK-NEXT: db[db_0, db_1] = sum[db_z0: 0..n - 1](df[db_z0, db_1] * a[db_z0, db_0])
