"""The shape rule of ``gram(X, w)``: the weighted Gram matrix ``X^T diag(w) X`` (``GRAM`` in :mod:`.expr`).

``gram(X, w)[a, b] = sum[z](X[z, a] * w[z] * X[z, b])`` with ``X`` of shape
``m x n`` and ``w`` of length ``m`` is ``n x n``.  Both verifiers (L1 and
L2) check it here, so the two levels give the same message.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .expr import GRAM, Access, Binary, MatrixFn, Sum, fresh_name
from .index import Affine, format_affine

__all__ = ["GRAM_RANKS", "gram_as_sum", "gram_result"]

if TYPE_CHECKING:
    from .program import Program

#: the orders of gram's two arguments: a matrix and a vector of weights
GRAM_RANKS = (2, 1)


def gram_result(x: str, w: str, ex: Sequence[Affine], ew: Sequence[Affine]) -> tuple[tuple[Affine, ...], str | None]:
    """The result's extents ``(n, n)``, and why ``gram(x, w)`` is malformed (``None`` when it is not)."""
    if len(ex) != 2 or len(ew) != 1:
        return (), f"gram needs a matrix and a vector: '{x}' has {len(ex)} dimensions, '{w}' has {len(ew)}"
    if ex[0] != ew[0]:
        return (), (f"gram needs one weight per row of '{x}': '{x}' is {format_affine(ex[0])} x "
                    f"{format_affine(ex[1])}, '{w}' has {format_affine(ew[0])} entries")
    return (ex[1], ex[1]), None


def gram_as_sum(program: "Program") -> "Program":
    """Every ``G[a, b] = gram(X, w)[a, b]`` written out as ``sum[z: 0..m - 1](X[z, a] * w[z] * X[z, b])``.

    ``autodiff`` differentiates sums of products by its general rules; the
    ``blas`` pass of the compile pipeline turns the written-out sum back
    into ``gram`` (its symmetric product rule), so nothing is lost by
    differentiating the expansion.  Needs the extents (after ``infer-ranges``).
    """
    defs = []
    for d in program.definitions:
        ext = program.extents_of(d.body.args[0]) if isinstance(d.body, MatrixFn) and d.body.fn == GRAM else None
        if ext is not None:
            x, w = d.body.args  # type: ignore[union-attr]
            m = ext[0]
            z = fresh_name("z", set(d.indices) | set(program.sizes()))
            a, b, zv = Affine.var(d.indices[0]), Affine.var(d.indices[1]), Affine.var(z)
            body = Binary("*", Binary("*", Access(x, (zv, a)), Access(w, (zv,))), Access(x, (zv, b)))
            d = d.with_body(Sum(z, (Affine.constant(0),), (m - 1,), body))
        defs.append(d)
    return program.with_definitions(defs)
