# infer-ranges proves every access in bounds, or says which range the index covers.
# RUN: not tcc compile %s 2>&1
input x[5]
y[i] = x[i + 1]
output y[5]
# CHECK: infer_ranges_out_of_bounds.tcc:4:8: error: access x[i + 1] is out of bounds: i + 1 ranges over 1..5, but 'x' has extent 5
# CHECK-NEXT: y[i] = x[i + 1]
# CHECK-NEXT: ^
# CHECK-NOT: Traceback
