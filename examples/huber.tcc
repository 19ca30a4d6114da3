# Huber loss of the residuals r = x - y (delta = 1): quadratic near 0, linear beyond.
# The condition compares values; the derivative is that of the chosen branch.
input x[n], y[n]
output loss
loss = sum[i](where(abs(x[i] - y[i]) <= 1, 0.5 * (x[i] - y[i])**2, abs(x[i] - y[i]) - 0.5))
