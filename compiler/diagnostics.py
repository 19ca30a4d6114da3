"""Re-export of :mod:`tcc.ir.diagnostics` for code written against ``tcc.diagnostics``.

The errors moved to the IR layer so that the lexer, parsers and verifiers,
which raise them, import nothing from the layer above.
"""
from tcc.ir.diagnostics import Loc, SourceMap, TccError

__all__ = ["Loc", "SourceMap", "TccError"]
