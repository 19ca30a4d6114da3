# lower-llvm: a kernel is a body function (buffers noalias, the sizes, the part
# of the iteration space) and an entry that unpacks the buffer and size arrays.
# RUN: tcc compile %s --emit llvm --passes infer-ranges,lower-loops,lower-llvm
input x[n]
y[i] = exp(x[i])
# CHECK: define internal void @"tcc_0_y.body"(ptr noalias %"x", ptr noalias %"y", i64 %"n", i64 %"part", i64 %"nparts")
# CHECK: define void @"tcc_0_y"(ptr %"bufs", ptr %"sizes", i64 %"part", i64 %"nparts")
