# tile{vector-bytes=16}: a column reduction gets 4 accumulators jammed through
# the reduction over a, and a rest kernel for the last 10 % 4 columns.
# RUN: tcc compile %s --emit loops --passes 'infer-ranges,lower-loops,tile{vector-bytes=16}'
input G[5, 10]
b[c] = sum[a](G[a, c])
# CHECK-LABEL: kernel b {
# CHECK-NEXT: for c_t in 0..1 {
# CHECK: local b_acc_t3 = 0
# CHECK-NEXT: for a in 0..4 {
# CHECK-NEXT: b_acc_t0 += G[a, 4*c_t]
# CHECK: b_acc_t3 += G[a, 4*c_t + 3]
# CHECK: b[4*c_t + 3] = b_acc_t3
# CHECK-LABEL: kernel b_rest {
# CHECK-NEXT: for c in 8..9 {
