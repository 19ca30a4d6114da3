# An embedding lookup: row tok[i] of the table emb for each token i (a gather).
# tok holds integers in 0..v - 1, checked on every call.  The gradient with respect
# to emb is a gather too: the tokens that read row w, found through an inverse
# index (a counting sort of tok) that the call builds once.
index tok[n] < v
input emb[v, d]
y[i, j] = emb[tok[i], j]
