"""``blas``: contractions that are matrix products become ``matmul`` definitions (Zhabinski and Zhabinskii, sec. V).

A definition

    D[a, b] = sum[z: 0..N - 1](F)

whose summand ``F`` is a product of factors that each depend on ``a`` and
``z`` only ("left") or on ``z`` and ``b`` only ("right") is the matrix product
``L @ R`` with ``L[a, z]`` the product of the left factors and ``R[z, b]`` that
of the right ones.  The pass rewrites it to

    L[a, z] = <left factors>              # a new local, unless it is exactly P[a, z]
    R[z, b] = <right factors>             # likewise Q[z, b]
    D[a, b] = matmul(L, R)[a, b]

and ``lower-loops`` makes the last line an external kernel that the runtime
runs with NumPy's ``matmul`` (BLAS), while ``L`` and ``R`` are element-wise
kernels for the loop passes (``hoist``, ``fuse``, ``parallel``) like any other.
The logistic-regression Hessian ends in such an n x n x m contraction; BLAS
does it an order of magnitude faster than tcc's own loops.

**What is matched.**

* ``D`` has two indices (more: a batch, below) and known extents; its body is one ``sum``
  over a range ``0..N - 1`` with ``N - 1`` over sizes only (not ``a``, ``b``)
  and ``N >= 0`` provable (an empty range stays an empty sum), possibly inside
  a product with factors that depend on ``a`` only, on ``b`` only or on no
  index (``2 * sum[z](...)``, ``-sum[z](...)``, ``u[a] * sum[z](...)``): they
  move into the sum as factors of the same kind.
* The summand is split at ``*`` and negation, and at ``/`` only where the
  quotient itself mixes ``a`` and ``b`` (``x / y`` becomes ``x`` and
  ``1 / y``); each factor must depend on a subset of ``{a, z}`` or of
  ``{z, b}``.  A factor on both ``a`` and ``b`` (or a ``+``, a function, a
  ``where`` that mixes them) leaves the definition alone.
* Factors on ``z`` alone or on no index go left -- unless the left side would
  otherwise be a plain ``P[a, z]`` and the right side needs a definition of
  its own anyway; then they go right and no copy of ``P`` is made.  A
  negation goes with them.  Both sides must mention ``z``.
* A side that is exactly ``P[a, z]`` (``Q[z, b]``) for a tensor whose extents
  are the side's is used directly, and so is a transposed read ``P[z, a]``
  (``Q[b, z]``) of a tensor with the reversed extents: it is the argument
  ``transpose(P)``, which NumPy hands BLAS as stored with the transpose flag
  (``sum[z](X[z, a] * X[z, b])`` is ``matmul(transpose(X), X)``, the dense
  layer's ``X[a, z] * W[c, z]`` is ``matmul(X, transpose(W))``): no copy.
  NumPy's ``matmul``, given one buffer twice with one of them transposed,
  calls BLAS's ``syrk`` for such a Gram matrix: half the multiply-adds.
  Any other side gets an element-wise definition of its own, stored the way
  round most of its accesses read the two indices (``dY[z, c] * Y[z, c]``
  on the side ``[c, z]`` is defined as ``S[z, c]`` and passed as
  ``transpose(S)``: its kernel writes contiguously and shares a nest with
  its neighbours); a side equal to one already outlined in the program (the
  same body over the same extents, up to the names of its two indices) is
  that definition again -- the dense layer's ``dX`` and ``dW`` products
  read one ``dY * (1 - Y**2)``, once as stored and once transposed.
* Tiny products are not worth a call: when every extent is a constant and
  ``p * q * r < min-work`` (default 32768; times the batch extents for a
  batch) the definition stays.  Symbolic extents count as large.

**Batches of products.**  A definition ``D[h..., a, b]`` with more than two
indices is a batch of products over its leading indices ``h...`` (the
attention scores ``S[h, i, j] = sum[z](Q[h, i, z] * K[h, j, z])``): factors
may also depend on the batch indices, and a factor on the batch only goes
with the ``z``-only ones.  A side reads ``P[h..., a, z]`` (or transposed,
``P[h..., z, a]``) as it is stored; a side on no batch index is one matrix
for the whole batch (``sum[z](Q[h, i, z] * W[z, j])`` is ``matmul(Q, W)``);
an outlined side has the batch indices first when one of its factors
depends on them.  At least one side must vary along the batch.  The result
is ``D[h..., a, b] = matmul(L, R)[h..., a, b]``, which NumPy runs as one
``np.matmul`` of stacked matrices (a GEMM per member, transpose flags
included).

**The epilogue split.**  A definition that is not such a product as a
whole but wraps contractions in element-wise work -- the dense layer
``Y[a, c] = tanh(sum[z](X[a, z] * W[c, z]) + b[c])``, ``2 * sum[z](...) -
D[a, b]``, a sum or product of several contractions -- is split: each
``sum`` whose free indices are two or more of ``D``'s and which the rules
above accept as the body of a definition ``D_mm[h..., x, y]`` (``D``'s
extents; ``x``, ``y`` the last two of the sum's indices in ``D``'s order,
else the first other pair that matches, the rest the batch in ``D``'s
order; ``min-work`` included) becomes that definition and its ``matmul``,
and ``D`` reads ``D_mm[h..., x, y]`` in its place:

    Y_mm[a, c] = matmul(X, transpose(W))[a, c]
    Y[a, c] = tanh(Y_mm[a, c] + b[c])          # the epilogue: element-wise

Sums are tried outermost first; one that does not match is searched for
matching sums inside it.  A sum inside one that binds an index of ``D`` is
left alone, and so is a sum inside a ``where``: the loops compute it only
where the guard holds (a Hessian's block diagonal), a product everywhere.  The same contraction written twice is one node and one
product.  The epilogue is an ordinary element-wise definition for the loop
passes (``fuse`` merges it with its neighbours, ``parallel`` marks it); it
costs one extra write and read of ``D_mm``, small beside the
``p * q * r`` multiply-adds that ``min-work`` asks for.

**Matrix-vector products.**  In the epilogue split (so also for a whole
body), a ``sum[z: 0..N - 1]`` whose free indices are exactly one index
``x`` of ``D`` (and sizes) is a matrix-vector product when its summand's
factors split into those on ``x`` (and ``z``), the matrix side, and those
on ``z`` alone or on nothing, the vector side, each side mentioning ``z``
(a divisor not on both is a factor of its own):

    y[i] = sum[j](A[i, j] * x[j])             # g[j] = sum[i](x[i] * A[i, j]) alike
    y_rhs[j, u] = x[j]                        # the vector as an N x 1 matrix (u: extent 1)
    y_mm[i, u] = matmul(A, y_rhs)[i, u]       # matmul(transpose(A), g_rhs) for the column read
    y[i] = y_mm[i, 0]

The matrix side must be a plain read ``P[x, z]`` or ``P[z, x]`` (read in
place; factors on ``x`` alone multiply the result instead): an outlined
matrix would be written and read again, as much memory traffic as the
loops' own pass over it, so such sums stay loops.  The vector side always gets its ``N x 1``
definition (``N`` writes beside the ``p * N`` multiply-adds; equal ones
are shared, as in the quadratic form's gradient ``(A + A^T) x``).  NumPy
runs a matrix times an ``N x 1`` matrix, transposed or not, as one BLAS
call, instead of a loop nest that strides through ``A`` for a column read.
``min-work`` counts ``p * N``.  No other part of the compiler needs to know:
the product is an ordinary ``matmul`` of two matrices.

New definitions are named ``<D>_lhs`` / ``<D>_rhs`` / ``<D>_mm`` (made
fresh), are ``local``, and are placed right before ``D``; the sum's variable becomes the
inner index of both.  The rewritten program is again a program of the
language: it prints, parses back and runs in the interpreter.

**Stride-1 convolutions.** A sum over two reads, one of them at ``u + v`` or
``u - v`` on some axes (a convolution and both of its gradients), becomes
``contract`` with windows (:mod:`.window`): one GEMM per kernel offset at
run time.

**General contractions, reuse, the quadratic form.**  What these rules
leave and is a sum over the product of two plain reads (several contracted
indices, batch indices anywhere, an interleaved result) becomes
``contract(P[...], Q[...])`` under a copy-versus-loops cost model
(:mod:`.contract`); a later definition that computes an outlined side again
reads it (:mod:`.reuse`); and ``sum[i](sum[j](x[i] * A[i, j] * x[j]))``
becomes a matrix-vector product and a dot (:meth:`Rewriter.nested_matvec`).
docs/passes.md (blas) has the groups and the cost model.

The pass runs in the CPU pipeline right before ``lower-loops``; the GPU
pipeline has no such external kernels (``target=cuda`` refuses ``matmul``).
"""
from __future__ import annotations

from dataclasses import dataclass

from tcc.ir.program import Program
from tcc.passes.pass_base import Level, Pass, PassContext

from .contract import COPY_COST
from .match import DEFAULT_MIN_WORK, Rewriter

__all__ = ["Blas", "blas_program", "DEFAULT_MIN_WORK"]


def blas_program(program: Program, min_work: int = DEFAULT_MIN_WORK, copy_cost: float = COPY_COST) -> Program:
    """Rewrite every matching definition (see the module docstring)."""
    rw = Rewriter(program, min_work, copy_cost)
    return program.expand_definitions(rw.rewrite)


@dataclass(frozen=True)
class Blas(Pass):
    """Definitions that are matrix products become ``matmul`` (an external BLAS kernel)."""

    name = "blas"
    level = Level.INDEX
    summary = ("contractions D[a, b] = sum[z](left[a, z] * right[z, b]), alone or inside element-wise work, "
               "become matmul(L, R) definitions, other contractions and stride-1 convolutions contract(...), "
               "run by BLAS")

    # p * q * r below which a product with constant extents keeps its loops
    min_work: int = DEFAULT_MIN_WORK
    # multiply-adds of the loops worth one element moved by a transposing copy (contract.py)
    copy_cost: float = COPY_COST

    def run(self, program: Program, ctx: PassContext) -> Program:
        return blas_program(program, self.min_work, self.copy_cost)
