"""``autodiff``: the derivative pass, one package for both of its modes.

Reverse mode (:mod:`.reverse`, adjoints in delta form) and forward mode
(:mod:`.forward`, tangents) apply the same local derivatives to the same
definitions; :mod:`.rules` holds what they share, so neither mode imports the
other and the pass itself is only the choice between them.  The pass table
names ``tcc.passes.autodiff:AutoDiff``.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from tcc.ir.diagnostics import TccError
from tcc.ir.gram import gram_as_sum
from tcc.ir.program import Program
from tcc.passes.autodiff.forward import differentiate_forward
from tcc.passes.autodiff.reverse import differentiate
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)

__all__ = ["AutoDiff", "differentiate", "differentiate_forward"]


@dataclass(frozen=True)
class AutoDiff(Pass):
    """The pass: its options choose the mode and the seed, the modules of this package do the work."""

    name = "autodiff"
    level = Level.INDEX
    summary = "reverse-mode derivative of one definition w.r.t. inputs, in delta form (eq. 40)"

    of: str = ""
    wrt: tuple[str, ...] = ()
    #: ``reverse`` (adjoints ``dx`` from a seed ``df``) or ``forward`` (the
    #: tangent ``df`` of f from tangents ``dx`` of the inputs: a Jacobian-vector product)
    mode: str = "reverse"
    #: ``input``: the seed is a new input; ``delta``: it is the Kronecker delta, so
    #: the result is the full Jacobian (Urban and van der Smagt, sec. 5.3), with f's indices first
    seed: str = "input"
    #: keep ``of`` itself as an output (first), as ``jax.value_and_grad`` does: a
    #: training step needs the value and the gradient, and one program that computes
    #: both shares what they have in common (the value's intermediates, which the
    #: gradient reads anyway) instead of running a forward program and a gradient
    #: program that recomputes them
    value: bool = False

    def run(self, program: Program, ctx: PassContext) -> Program:
        result = self._differentiate(program)
        if self.value:
            result = dataclasses.replace(result, outputs=(self.of,) + tuple(o for o in result.outputs if o != self.of))
        return result

    def _differentiate(self, program: Program) -> Program:
        if self.mode not in ("reverse", "forward"):
            raise TccError(f"autodiff: mode must be 'reverse' or 'forward', not '{self.mode}'")
        if self.seed not in ("input", "delta"):
            raise TccError(f"autodiff: seed must be 'input' or 'delta', not '{self.seed}'")
        program = gram_as_sum(program)  # a Gram matrix as the sum it stands for (tcc.ir.gram)
        if self.mode == "forward":
            return differentiate_forward(program, self.of, self.wrt, delta=self.seed == "delta")
        return differentiate(program, self.of, self.wrt, delta=self.seed == "delta")
