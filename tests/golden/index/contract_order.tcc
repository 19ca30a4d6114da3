# contract-order: A B v is contracted as A (B v), a local of 100 numbers, never
# the 100 x 100 product A B.
# RUN: tcc compile %s --passes infer-ranges,contract-order
input A[100, 100], B[100, 100], v[100]
y[i] = sum[j, k](A[i, j] * B[j, k] * v[k])
# CHECK: local y_ctr[100]
# CHECK-NEXT: y_ctr[j] = sum[k: 0..99](B[j, k] * v[k])
# CHECK-NEXT: y[i] = sum[j: 0..99](A[i, j] * y_ctr[j])
# CHECK-NOT: sum[j: 0..99, k
