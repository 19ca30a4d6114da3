# A user function: softplus, inlined where it is called (its derivative comes from its body).
# The loss of a linear model with labels t in {-1, +1}: sum_i softplus(-t_i (X w)_i) / m,
# dividing by the number of examples m (a size used as a value).
def softplus(u) = log(1 + exp(u))
input X[m, n], w[n], t[m]
output loss
loss = sum[i](softplus(-t[i] * sum[j](X[i, j] * w[j]))) / m
