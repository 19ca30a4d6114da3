"""Re-export of :mod:`tcc.passes.pass_base` for passes written against ``tcc.pass_base``.

The pass base class lives in the passes layer so that a pass imports nothing
from the compiler layer above it.
"""
from tcc.passes.pass_base import Level, Pass, PassContext

__all__ = ["Level", "Pass", "PassContext"]
