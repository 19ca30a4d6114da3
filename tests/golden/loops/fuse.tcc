# fuse: two kernels over the same loop become one nest; t's value is a let.
# RUN: tcc compile %s --emit loops --passes infer-ranges,lower-loops,fuse
input x[n]
local t[n]
t[i] = exp(x[i])
y[i] = t[i] * 2
output y[n]
# CHECK: kernel t_y {
# CHECK-NEXT: for i in 0..n - 1 {
# CHECK-NEXT: let t_v = exp(x[i])
# CHECK-NEXT: t[i] = t_v
# CHECK-NEXT: y[i] = t_v * 2
# CHECK-NOT: kernel
