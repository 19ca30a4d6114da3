"""``factor-linear``: a definition linear in one full-rank read becomes that read times a smaller tensor.

Reverse-over-reverse differentiation (a Hessian, a Jacobian seeded with
deltas) propagates a tangent of full rank through the chain rule, and every
tangent definition is linear in the one before it.  The logistic-regression
Hessian is the typical case::

    ddz[k, i] = X[i, k] * y[i]
    dz2[k, i] = -((-ddz[k, i] * (1 / (1 + exp(-z[i]))) + ...) * exp(-z[i]))
    dw2[k, j] = sum[z](dz2[k, z] * y[z] * X[z, j])

``dz2`` evaluates its exponentials and divisions n * m times although they
depend on ``i`` alone, and ``blas`` sees ``dz2`` as a factor on both ``k`` and
the contracted index that it has to store and read again: an n x m tensor
written twice on the way to one GEMM.  This pass does two rewrites:

1. **Factor.**  A body ``B`` that is homogeneous of degree one in an access
   ``A`` whose indices cover every index of the definition, while everything
   else in ``B`` depends on a strict subset ``J`` of them, is ``A * B[A := 1]``
   in real arithmetic.  ``B[A := 1]`` becomes a local ``<D>_c[J]`` (computed
   once per ``J``, not per element) and the body ``A * <D>_c[J]``.
   Homogeneity is decided on the syntax: ``A`` itself has degree 1, an
   expression free of ``A`` degree 0, ``+``/``-`` need equal degrees (a
   literal zero matches any), ``*`` adds them, a divisor and a function's
   argument must have degree 0.  ``A`` under a ``where`` is left alone: the
   guard may be what keeps its read in bounds.  Rounding may differ from the unfactored
   form (``A*x + A*y`` becomes ``A*(x + y)``), as for any reassociation;
   the values are equal in real arithmetic.
2. **Inline monomials.**  A local definition whose body is a product of
   reads and constants (a monomial), read exactly once in the program, is
   substituted into its reader and dropped.  Nothing is recomputed that a
   stored tensor would have saved except the product's multiplications,
   and the reader sees the factors themselves: the Hessian's product
   becomes ``sum[z](X[z, k] * y[z] * dz2_c[z] * y[z] * X[z, j])``, which
   ``blas`` recognises as the weighted Gram matrix ``X^T diag(w) X``.

The pass runs in the derivative pipelines after ``simplify`` (which it
relies on for the delta-free bodies).  It never touches results or a
definition that holds a sum, a reduction, a selection or a matrix function.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from tcc.ir.expr import (
    ONE, Access, Binary, Const, Expr, MatrixFn, Unary, Where, free_names, fresh_name, is_zero, postorder, transform,
)
from tcc.ir.index import Affine
from tcc.ir.program import Definition, Program
from tcc.ir.substitution import inline_reads
from tcc.passes.pass_base import Level, Pass, PassContext
from tcc.passes.simplify import fold_all

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)

_ANY = -1  # the degree of a literal zero: homogeneous of every degree


def _degree(root: Expr, atom: Expr) -> int | None:
    """The degree of ``root`` in ``atom`` when ``root`` is homogeneous in it, else ``None``.

    Bottom-up over the DAG (no recursion: a derivative's flat sums are deep trees)."""
    deg: dict[Expr, int | None] = {}
    for e in postorder(root):
        kids = [deg[c] for c in e.children()]
        if e is atom:
            d: int | None = 1
        elif is_zero(e):
            d = _ANY
        elif all(k == 0 for k in kids):  # reads and constants too: they have no children
            d = 0
        elif None in kids:
            d = None
        elif isinstance(e, Unary):
            d = kids[0] if e.op == "neg" else None  # a function of the atom is not linear
        elif isinstance(e, Binary):
            d = _binary_degree(e, kids[0], kids[1])  # type: ignore[arg-type]
        else:  # a where (its guard may protect the atom's read: it stays under it), sum, reduction, selection
            d = None
        deg[e] = d
    return deg[root]


def _same(a: int | None, b: int | None) -> int | None:
    if a is None or b is None:
        return None
    if a == _ANY:
        return b
    if b == _ANY or a == b:
        return a
    return None


def _binary_degree(e: Binary, a: int, b: int) -> int | None:
    if e.op in ("+", "-"):
        return _same(a, b)
    if e.op == "*":
        return _ANY if _ANY in (a, b) else a + b
    if e.op == "/":
        return a if b == 0 else None
    if e.op == "**":  # x ** 1 is x; any other power of the atom is not linear
        return 0 if (a, b) == (0, 0) else a if (b == 0 and e.rhs == ONE) else None
    return None


def _monomial(e: Expr) -> bool:
    """A product of reads and constants, possibly negated."""
    return all(isinstance(n, (Access, Const)) or (isinstance(n, Unary) and n.op == "neg")
               or (isinstance(n, Binary) and n.op == "*") for n in postorder(e))


def _plain_body(d: Definition) -> bool:
    """An element-wise body: no sum, reduction, selection or matrix function to move."""
    return d.extents is not None and all(isinstance(n, (Access, Const, Unary, Binary, Where)) for n in postorder(d.body))


def _factor(d: Definition, sizes: set[str], taken: set[str]) -> list[Definition]:
    """``[d]``, or ``[<d>_c, d']`` with ``d' = A * <d>_c[J]`` (see the module docstring)."""
    if not _plain_body(d) or _monomial(d.body):
        return [d]
    own = set(d.indices)
    full = [n for n in postorder(d.body) if isinstance(n, Access) and set(free_names(n)) - sizes == own]
    if len(full) != 1:  # a second full-rank read would stay in the coefficient: nothing is computed fewer times
        return [d]
    (atom,) = full
    if _degree(d.body, atom) != 1:
        return [d]
    coeff = fold_all(transform(d.body, lambda n: ONE if n is atom else n))
    rest = set(free_names(coeff)) - sizes
    if rest >= own or _monomial(coeff):
        return [d]  # nothing is computed fewer times, or the product is already explicit
    keep = tuple(x for x in d.indices if x in rest)
    assert d.extents is not None
    name = fresh_name(f"{d.name}_c", taken)
    taken.add(name)
    ext = tuple(e for x, e in zip(d.indices, d.extents) if x in rest)
    logger.info("%s: linear in %s; the coefficient is %s[%s]", d.name, atom, name, ", ".join(keep))
    return [Definition(name, keep, coeff, ext, d.loc),
            d.with_body(Binary("*", atom, Access(name, tuple(Affine.var(x) for x in keep))))]


def _read_counts(program: Program) -> dict[str, int]:
    """How many distinct reads each tensor has (a matrix function's argument counts as two: it is read whole)."""
    counts: dict[str, int] = {}
    for d in program.definitions:
        reads = ([a for a in d.body.args for _ in (0, 1)] if isinstance(d.body, MatrixFn)
                 else [n.tensor for n in postorder(d.body) if isinstance(n, Access)])
        for t in reads:
            counts[t] = counts.get(t, 0) + 1
    return counts


def _inline(program: Program) -> Program:
    """Substitute the monomial locals read exactly once into their readers, in program order."""
    results = set(program.results())
    counts = _read_counts(program)
    bodies: dict[str, Definition] = {}
    done: set[str] = set()
    defs: list[Definition] = []
    for d in program.definitions:
        if bodies and not isinstance(d.body, MatrixFn):
            new, used = inline_reads(d.body, bodies)
            done |= used
            if new is not d.body:
                logger.info("%s: now %s", d.name, new)
                d = d.with_body(new)
        if (d.name not in results and counts.get(d.name) == 1 and _plain_body(d) and _monomial(d.body)
                and len(set(d.indices)) == len(d.indices)):
            bodies[d.name] = d
        defs.append(d)
    if not done:
        return program
    return program.with_definitions(d for d in defs if d.name not in done)


def factor_linear(program: Program) -> Program:
    sizes = set(program.sizes())
    taken = program.names_in_use()
    defs: list[Definition] = []
    for d in program.definitions:
        defs.extend(_factor(d, sizes, taken))
    factored = program.with_definitions(defs) if len(defs) != len(program.definitions) else program
    return _inline(factored)


@dataclass(frozen=True)
class FactorLinear(Pass):
    name = "factor-linear"
    level = Level.INDEX
    summary = ("a definition linear in one full-rank read becomes that read times a smaller local; "
               "monomial locals read once are inlined into their reader")

    def run(self, program: Program, ctx: PassContext) -> Program:
        return factor_linear(program)
