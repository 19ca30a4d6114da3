# logistic_regression.tcc — Laue, Mitterreiter, Giesen (sec. 4):
# the logistic-regression loss  sum_i log(1 + exp(-y_i (X w)_i))  for m
# examples with n features and labels y_i in {-1, +1}, in index notation.
input X[m, n], w[n], y[m]
output f
local z[m]
z[i] = y[i] * sum[j](X[i, j] * w[j])
f = sum[i](log(1 + exp(-z[i])))
