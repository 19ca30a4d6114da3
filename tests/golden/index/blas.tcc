# blas: a 64 x 64 x 64 matrix product (above min-work) becomes an extern matmul.
# RUN: tcc compile %s --emit loops --passes infer-ranges,blas,lower-loops
input  a[64, 64], b[64, 64]
f[i, j] = sum[k](a[i, k] * b[k, j])
# CHECK: extern matmul(a, b) -> f
# CHECK-NOT: f_acc
