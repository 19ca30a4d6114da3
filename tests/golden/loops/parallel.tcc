# parallel: the outer loop of each one-loop kernel writing its buffer one to one.
# RUN: tcc compile %s --emit loops --passes infer-ranges,lower-loops,parallel
input x[n]
local t[n]
t[i] = exp(x[i])
y[i] = t[i] * 2
output y[n]
# CHECK-LABEL: kernel t {
# CHECK-NEXT: parallel for i in 0..n - 1 {
# CHECK-NEXT: t[i] = exp(x[i])
# CHECK-LABEL: kernel y {
# CHECK-NEXT: parallel for i in 0..n - 1 {
