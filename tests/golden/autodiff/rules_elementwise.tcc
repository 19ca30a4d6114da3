# Derivative rules of log, sqrt, tanh and a quotient (reverse mode):
# d log x = 1/x, d sqrt x = 1/(2 sqrt x), d tanh x = 1 - tanh(x)**2,
# d (x / (1 + x)) = 1/(1 + x) - x/(1 + x)**2.
# RUN: tcc grad %s --of y --wrt x
input x[n]
y[i] = log(x[i]) + sqrt(x[i]) + tanh(x[i]) + x[i] / (1 + x[i])
# CHECK: input x[n], dy[n]
# CHECK-NEXT: output dx[n]
# CHECK-NEXT: dx[dx_0] =
# CHECK-SAME: dy[dx_0] / (1 + x[dx_0]) + -(dy[dx_0] * x[dx_0] / (1 + x[dx_0])**2)
# CHECK-SAME: + dy[dx_0] * (1 - tanh(x[dx_0])**2)
# CHECK-SAME: + dy[dx_0] / (2 * sqrt(x[dx_0]))
# CHECK-SAME: + dy[dx_0] / x[dx_0]
