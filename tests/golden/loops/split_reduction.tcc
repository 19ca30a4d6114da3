# split-reduction: a sum of 100000 terms into one output becomes 1024 parallel
# partial sums (a temp) and a kernel adding them; each part reads a stride-1024 slice.
# RUN: tcc compile %s --emit loops --passes infer-ranges,lower-loops,split-reduction
input x[100000]
s = sum[i](x[i])
# CHECK: temp s_part[1024]
# CHECK-LABEL: kernel s_part {
# CHECK-NEXT: parallel for p in 0..1023 {
# CHECK-NEXT: local s_acc = 0
# CHECK-NEXT: for i_t in (1023 - p) // 1024..(99999 - p) // 1024 {
# CHECK-NEXT: s_acc += x[1024*i_t + p]
# CHECK: s_part[p] = s_acc
# CHECK-LABEL: kernel s {
# CHECK: for p2 in 0..1023 {
# CHECK-NEXT: s_acc += s_part[p2]
# CHECK: s = s_acc
