# exp_strided.tcc — Urban & van der Smagt, sec. 5.1, with a concrete M = 3:
# f_ij(x) = exp(x_{M i + j}).  With j in 0..M-1 this is a reshape; with j in
# 0..4 the windows overlap and the derivative sums over the pairs (i, j) with
# 3 i + j = k (kernel of A = (3 1) is (1, -3)).
input  x[17]
output f[5, 5]
f[i, j] = exp(x[3*i + j])
