# A sparse matrix (CSR: row pointers ptr, column indices col, values val) times a vector.
# Row i holds the non-zeros ptr[i]..ptr[i + 1] - 1; an empty row sums to 0.
# The derivatives with respect to val and x are gathers: dx through the CSR transpose
# (an inverse index of col), dval through the row of each non-zero.
index ptr[m + 1] <= nnz, col[nnz] < n
input val[nnz], x[n]
y[i] = sum[k: ptr[i]..ptr[i + 1] - 1](val[k] * x[col[k]])
