# llvm-opt (O3, loop vectorizer): the element-wise loop works on vectors of doubles.
# RUN: tcc compile %s --emit llvm
input x[n]
y[i] = x[i] * 3 + 1
# CHECK: define void @tcc_0_y(
# CHECK: %wide.load = load {{<[0-9]+ x double>}}
