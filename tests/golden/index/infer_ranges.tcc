# infer-ranges: the "valid" range of a correlation, y's extent from x's and w's.
# RUN: tcc compile %s --dump-before infer-ranges --dump-after infer-ranges 2>&1
input x[n], w[m]
y[i] = sum[k](x[i + k] * w[k])
# CHECK-LABEL: IR before infer-ranges
# CHECK: y[i] = sum[k](x[i + k] * w[k])
# CHECK-LABEL: IR after infer-ranges
# CHECK: input x[n], w[m]
# CHECK-NEXT: output y[n - m + 1]
# CHECK-NEXT: y[i] = sum[k: 0..m - 1](x[i + k] * w[k])
