# inverse-index: the scan where(tok[z] == demb_0, ...) of an embedding's gradient
# becomes a gather over a counting-sort inverse index (tok_perm, tok_ptr).
# RUN: tcc grad %s --of y --wrt emb --dump-before inverse-index --dump-after inverse-index 2>&1
index tok[n] < v
input emb[v, d]
y[i, j] = emb[tok[i], j]
# CHECK-LABEL: IR before inverse-index
# CHECK: demb[demb_0, demb_1] = sum[demb_z0: 0..n - 1](where(tok[demb_z0] == demb_0, dy[demb_z0, demb_1], 0))
# CHECK-LABEL: IR after inverse-index
# CHECK: index tok[n] < v
# CHECK-NEXT: index tok_perm[n] < n = inverse_perm(tok)
# CHECK-NEXT: index tok_ptr[v + 1] <= n = inverse_ptr(tok)
# CHECK-NOT: where(tok
# CHECK: demb[demb_0, demb_1] = sum[demb_z0_p: tok_ptr[demb_0]..tok_ptr[demb_0 + 1] - 1](dy[tok_perm[demb_z0_p], demb_1])
