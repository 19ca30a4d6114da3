# box_blur.tcc — a separable 3x3 box blur ("valid" borders): a horizontal
# pass over rows, then a vertical pass over columns (Zhabinski and Zhabinskii's fused
# element-wise kernels; Urban sec. 5.1 shifted index maps i + k).
input  img[h, w]
local  row[h, w - 2]
output blur[h - 2, w - 2]
row[i, j] = sum[k: 0..2](img[i, j + k]) / 3
blur[i, j] = sum[k: 0..2](row[i + k, j]) / 3
