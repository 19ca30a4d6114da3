"""The range of index arithmetic: the one bound that the interpreter and every compiled target share.

It lives in ir/ because it is a fact about index expressions (integer-affine
``Affine`` values), and both the reference interpreter (compiler layer) and
the LLVM lowering (backends layer) must refuse exactly the same programs
with the same message; :mod:`tcc.sizes` re-exports it.

Index expressions are integer-affine and both the interpreter and compiled
code evaluate them in 64-bit integers.  Rather than give a wrapped-around
(interpreter) or undefined (LLVM's ``nsw`` arithmetic) value where that
overflows, tcc assumes that every size and index value lies within
``+-INDEX_LIMIT`` (2**40: no extent that large can be allocated or iterated
over) -- :func:`tcc.sizes.bind_sizes` refuses larger sizes -- and rejects an index
expression whose value could then leave the 64-bit range
(:func:`check_index_range`).  Within the limit, 64-bit arithmetic is exact,
so the interpreter and every target agree.
"""
from __future__ import annotations

from tcc.ir.diagnostics import TccError
from tcc.ir.expr import RANGED, Access, CSum, Expr, MatrixFn, Sum, Where, postorder
from tcc.ir.index import Affine, Compare, Cond, Lookup, Mod, Not, format_affine
from tcc.ir.program import Program

__all__ = [
    "INDEX_LIMIT", "index_magnitude", "check_index_range", "check_index_ranges", "check_program_index_ranges",
    "cond_affines",
]

#: Every size and index value is assumed to lie within +-INDEX_LIMIT.
INDEX_LIMIT = 1 << 40

_INT64_MAX = (1 << 63) - 1


def index_magnitude(e: Affine) -> int:
    """An upper bound of ``|e|`` (and of every partial sum that evaluates it)
    when each name is at most INDEX_LIMIT in magnitude.

    ``x // d`` is at most ``|x|`` and ``x % d`` below ``d`` (``d >= 1``).
    """
    total = abs(e.const)
    for atom, c in e.terms:
        if isinstance(atom, str):
            value = INDEX_LIMIT
        elif isinstance(atom, Lookup):  # an entry of an index input: validated on entry to be a size at most
            value = max([INDEX_LIMIT] + [index_magnitude(i) for i in atom.indices])
        elif isinstance(atom, Mod):
            value = max(atom.den - 1, index_magnitude(atom.num))  # its numerator is evaluated too
        else:
            value = index_magnitude(atom.num)
        total += abs(c) * value
    return total


def check_index_range(e: Affine, where: str) -> None:
    """Refuse an index expression whose 64-bit evaluation could overflow.

    Both the interpreter and the LLVM lowering call this for every index
    expression they evaluate, so a program is rejected by both or by
    neither, with the same message.
    """
    bound = index_magnitude(e)
    if bound > _INT64_MAX:
        raise TccError(
            f"index expression {format_affine(e)} in {where} may overflow 64-bit integer arithmetic: "
            f"with sizes and indices up to 2**40 in magnitude it can reach about 2**{bound.bit_length() - 1}; "
            f"index constants and coefficients must keep it below 2**63"
        )


def cond_affines(c: Cond) -> list[Affine]:
    """The two sides of every comparison in the condition ``c``."""
    if isinstance(c, Compare):
        return [c.lhs, c.rhs]
    if isinstance(c, Not):
        return cond_affines(c.part)
    return [e for p in getattr(c, "parts", ()) for e in cond_affines(p)]


def check_index_ranges(body: Expr, where: str) -> None:
    """:func:`check_index_range` for every index expression of ``body``: accesses,
    ``where`` conditions, sum bounds and constraints -- evaluated or not."""
    for node in postorder(body):
        affines: list[Affine] = []
        if isinstance(node, Access):
            affines = list(node.indices)
        elif isinstance(node, Where):
            affines = cond_affines(node.cond)
        elif isinstance(node, RANGED):
            affines = [*node.lo, *node.hi]
        elif isinstance(node, CSum):
            affines = [e for c in node.constraints for e in cond_affines(c)]
        for e in affines:
            check_index_range(e, where)


def check_program_index_ranges(program: Program) -> None:
    """Every definition's index expressions (see :func:`check_index_ranges`).

    The compiler calls this before its passes: they may decide a condition
    at compile time (in exact Python integers) and drop it, and the program
    must still be rejected as the interpreter rejects it.
    """
    for d in program.definitions:
        if not isinstance(d.body, MatrixFn):
            check_index_ranges(d.body, f"definition '{d.name}'")
