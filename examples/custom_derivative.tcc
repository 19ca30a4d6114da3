# A user function with a custom derivative (a numerically safe form of softplus'), and an
# assumption on the sizes that lets the program read x[0].
def softplus(t) = log(1 + exp(t)) with d(t) = sigmoid(t)
input x[n], w[n]
assume n >= 1
output f
f = sum[i](softplus(w[i] * (x[i] - x[0])))
