# simplify: the range conditions the facts imply go, the divisibility test stays
# and is used (under dx_0 % 2 == 0, 2*(dx_0 // 2) is dx_0), 2 - 1 folds, x**1 is x.
# RUN: tcc grad %s --of f --wrt x --dump-before simplify --dump-after simplify 2>&1
input x[10]
output f[5]
f[i] = x[2*i]**2
# CHECK-LABEL: IR before simplify
# CHECK: dx_0 // 2 <= 4
# CHECK-LABEL: IR after simplify
# CHECK-NOT: dx_0 // 2 >= 0
# CHECK-NOT: (2 - 1)
# CHECK: dx[dx_0] = where(dx_0 % 2 == 0, df[dx_0 // 2] * 2 * x[dx_0], 0)
