# Softmax over the rows of x with the row maximum subtracted first (the numerically
# stable form: exp never overflows). The max reduction's derivative is a gather that
# compares each x[i, j] with the stored mx[i]; here it cancels out, as it should.
input x[n, m]
local mx[n], z[n]
output p[n, m]
mx[i] = max[j](x[i, j])
z[i] = sum[j](exp(x[i, j] - mx[i]))
p[i, j] = exp(x[i, j] - mx[i]) / z[i]
