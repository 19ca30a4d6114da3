# unroll-jam: the short constant loop over j (3 trips) around the reduction is
# unrolled and its copies jammed into one k loop: three accumulators, A read once.
# RUN: tcc compile %s --emit loops --passes infer-ranges,lower-loops,unroll-jam
input A[n, 8], B[8, 3]
y[i, j] = sum[k](A[i, k] * B[k, j])
# CHECK: for i in 0..n - 1 {
# CHECK-NOT: for j
# CHECK: local y_acc_u2 = 0
# CHECK-NEXT: for k in 0..7 {
# CHECK-NEXT: y_acc_u0 += A[i, k] * B[k, 0]
# CHECK-NEXT: y_acc_u1 += A[i, k] * B[k, 1]
# CHECK-NEXT: y_acc_u2 += A[i, k] * B[k, 2]
# CHECK-NEXT: }
# CHECK-NEXT: y[i, 0] = y_acc_u0
# CHECK: y[i, 2] = y_acc_u2
