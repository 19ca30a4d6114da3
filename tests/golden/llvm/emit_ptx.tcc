# emit-ptx: PTX for an NVIDIA GPU (no GPU needed): a .entry per kernel.
# RUN: tcc compile %s --emit ptx
input x[n]
y[i] = exp(x[i]) * 2
# CHECK: .version
# CHECK: .target sm_
# CHECK: .entry
