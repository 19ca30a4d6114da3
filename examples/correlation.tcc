# correlation.tcc — the "valid" 1-D correlation of the Tensor Comprehensions
# range-inference rule (DESIGN.md, infer-ranges): y_i = sum_k x_{i+k} w_k with
# symbolic sizes.  Round one: w[k] fixes k in 0..m-1; round two: x[i + k]
# then fixes i in 0..n-m, so y has n - m + 1 elements.
input x[n], w[m]
y[i] = sum[k](x[i + k] * w[k])
