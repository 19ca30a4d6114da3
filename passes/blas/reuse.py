"""Reading an outlined side where a later definition computes the same values.

``blas`` outlines a side of a product into a definition of its own, e.g. the
dense layer's ``dX_lhs[a, c] = dY[a, c] * (1 - Y[a, c]**2)``.  The bias
gradient ``db[c] = sum[a](dY[a, c] * (1 - Y[a, c]**2))`` computes the same
expression again (and reads ``Y`` once more).  :func:`reuse_outlined`
replaces every sub-expression of a later definition that *is* an outlined
body up to the names of its indices by a read of it, ``db[c] =
sum[a](dX_lhs[a, c])``: one read instead of two reads and the arithmetic.

A sub-expression is taken only when each index it uses is a plain variable
whose whole range is the outlined definition's extent there: the
definition's own index over its extent, or a summed variable over ``0..N -
1`` with ``N`` that extent.  Then every value it reads is one the outlined
definition computed (and no read goes out of bounds).  Sub-expressions that
contain a sum are not compared (an outlined side has none).
"""
from __future__ import annotations

from itertools import permutations

from tcc.ir.expr import Access, Expr, Sum, free_names, postorder, transform
from tcc.ir.substitution import substitute
from tcc.ir.index import Affine
from tcc.ir.program import Definition

__all__ = ["reuse_outlined"]


def _ranges(d: Definition) -> dict[str, Affine]:
    """The extent of each index variable of ``d``: its own indices and every sum over ``0..N - 1``."""
    assert d.extents is not None
    ext: dict[str, Affine | None] = dict(zip(d.indices, d.extents))
    stack = [d.body]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, Sum):
            whole = e.lo == (Affine.constant(0),) and len(e.hi) == 1
            n = e.hi[0] + 1 if whole else None
            # a name bound twice with different ranges (or a range not from 0) is ambiguous: never taken
            ext[e.var] = n if ext.get(e.var, n) == n else None
        stack.extend(e.children())
    return {x: n for x, n in ext.items() if n is not None}


def _tree_size(root: Expr) -> int:
    """Nodes in ``root`` counted as a tree (a shared node once per use), as :func:`reuse_outlined` counts."""
    size: dict[int, int] = {}
    for node in postorder(root):
        size[id(node)] = 1 + sum(size[id(k)] for k in node.children())
    return size[id(root)]


def reuse_outlined(d: Definition, outlined: dict[tuple, str], canon: tuple[Affine, ...], sizes: set[str]) -> Definition:
    """``d`` with each sub-expression equal to an outlined side (``outlined``: (body over the
    canonical index names ``canon``, extents) -> name) replaced by a read of that side."""
    if d.extents is None or not outlined or not d.indices and not isinstance(d.body, Sum):
        return d
    arity = {len(ext) for _, ext in outlined}
    roots = {(type(body), getattr(body, "op", None)) for body, _ in outlined}  # a cheap first filter
    biggest = max(_tree_size(body) for body, _ in outlined)
    ranges = _ranges(d)
    memo: dict = {}
    size: dict[int, int] = {}  # nodes under each visited node (bottom-up): bigger ones cannot match

    def visit(e: Expr) -> Expr:
        size[id(e)] = n = 1 + sum(size.get(id(k), 1) for k in e.children())
        if n > biggest or (type(e), getattr(e, "op", None)) not in roots or any(isinstance(n, Sum) for n in e.children()):
            return e
        names = [x for x in free_names(e, memo) if x not in sizes]
        if len(names) not in arity or any(x not in ranges for x in names):
            return e
        for order in permutations(sorted(names)):
            ext = tuple(ranges[x] for x in order)
            key = (substitute(e, {x: canon[k] for k, x in enumerate(order)}), ext)
            name = outlined.get(key)
            if name is not None:
                return Access(name, tuple(Affine.var(x) for x in order))
        return e

    body = transform(d.body, visit)
    return d if body is d.body else d.with_body(body)
