"""``range-bound``: Fourier–Motzkin bounds for the kernel sums (Urban and van der Smagt, sec. 4.2, eq. 45–47).

A constrained sum over ``z`` with only inequalities becomes nested ranged
sums, ``z_0`` innermost, each bound a ``max(...)``/``min(...)`` of affine forms
in the outer ``z`` and the derivative's own indices, rounded with ceil/floor
(written ``(e + d - 1) // d`` and ``e // d``).  Fourier–Motzkin runs once per
sum, symbolically in β: evaluating a bound costs a few multiply-adds.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from tcc.ir.diagnostics import TccError
from tcc.ir.expr import CSum, Expr, all_names, transform
from tcc.ir.constrained_sums import UnboundedSum, csum_to_sums
from tcc.ir.program import Program
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)


def bound_sums(e: Expr, taken: set[str]) -> Expr:
    """Bound every constrained sum of ``e``, innermost first."""
    return transform(e, lambda n: csum_to_sums(n, taken | set(all_names(n))) if isinstance(n, CSum) else n)


@dataclass(frozen=True)
class RangeBound(Pass):
    name = "range-bound"
    level = Level.INDEX
    summary = "turn constrained sums into nested sums with max/min bounds (Fourier-Motzkin, eq. 45)"

    def run(self, program: Program, ctx: PassContext) -> Program:
        taken = program.names_in_use()
        defs = []
        for d in program.definitions:
            try:
                defs.append(d.with_body(bound_sums(d.body, taken)))
            except UnboundedSum as exc:
                raise TccError(f"in '{d.name}': {exc}", d.loc, program.source) from None
        return program.with_definitions(defs)
