# lower-loops: one loop nest per definition, the sum a reduction into a local.
# RUN: tcc compile %s --emit loops --passes infer-ranges,lower-loops
input  a[n, p], b[p, m]
f[i, j] = sum[k](a[i, k] * b[k, j])
# CHECK: # tcc loops
# CHECK-NEXT: sizes n, p, m
# CHECK-NEXT: input a[n, p], b[p, m]
# CHECK-NEXT: output f[n, m]
# CHECK-EMPTY:
# CHECK-NEXT: kernel f {
# CHECK-NEXT: for i in 0..n - 1 {
# CHECK-NEXT: for j in 0..m - 1 {
# CHECK-NEXT: local f_acc = 0
# CHECK-NEXT: for k in 0..p - 1 {
# CHECK-NEXT: f_acc += a[i, k] * b[k, j]
# CHECK-NEXT: }
# CHECK-NEXT: f[i, j] = f_acc
