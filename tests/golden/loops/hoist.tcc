# hoist: exp(w[i]) does not depend on k: it moves out of the reduction loop.
# RUN: tcc compile %s --emit loops --passes infer-ranges,lower-loops,hoist
input w[n], A[n, m], x[m]
y[i] = sum[k](exp(w[i]) * A[i, k] * x[k])
# CHECK: for i in 0..n - 1 {
# CHECK: for k in 0..m - 1 {
# CHECK-NOT: exp(
# CHECK: y_acc += A[i, k] * x[k]
# CHECK-NEXT: }
# CHECK-NEXT: let y_acc_s = where(m >= 1, y_acc * exp(w[i]){{.*}}, 0)
# CHECK-NEXT: y[i] = y_acc_s
