"""Print L1 programs in the tcc language.

The printed text parses back to the same IR (``print -> parse -> print`` is the
identity), so every dump can be replayed.  Expressions and conditions print
themselves (``format_expr`` in ``expr``, ``format_cond`` and ``format_affine``
in ``index``) so that ``str(node)`` needs no module above the node's own; this
module adds the declarations and definitions of a whole program on top of
them.
"""
from __future__ import annotations

from .expr import ExprPrinter, MatrixFn, format_expr
from .index import Affine, format_affine, format_cond
from .user_functions import format_function, functions_used

__all__ = ["ExprPrinter", "format_cond", "format_expr", "format_program"]


def _decl(name: str, extents: tuple[Affine, ...]) -> str:
    if not extents:
        return name
    return f"{name}[{', '.join(format_affine(x) for x in extents)}]"


def _input_lines(inputs) -> list[str]:  # noqa: ANN001 - TensorDecls
    """``input`` and ``index`` lines, one per run of the same kind: declaration order is kept (it orders sizes)."""
    lines: list[str] = []
    run: list[str] = []
    kind = ""
    for d in inputs:
        k = "index" if getattr(d, "bound", None) else "input"
        text = _decl(d.name, d.extents) + (f" {d.bound[0]} {format_affine(d.bound[1])}" if k == "index" else "")
        if getattr(d, "derived", None):  # `= inverse_ptr(tok)` ends its line
            k = "derived"
            text += f" = {d.derived[0]}({d.derived[1]})"
        if (k != kind or k == "derived") and run:
            lines.append(f"{'index' if kind == 'derived' else kind} " + ", ".join(run))
            run = []
        kind = k
        run.append(text)
    if run:
        lines.append(f"{'index' if kind == 'derived' else kind} " + ", ".join(run))
    return lines


def format_program(program) -> str:  # noqa: ANN001 - a Program: program.py imports this module for its __str__
    # the functions with custom derivatives its calls need, so the text parses back
    lines: list[str] = [format_function(c) for c in functions_used([d.body for d in program.definitions])]
    lines.extend(_input_lines(program.inputs))
    outs = []
    for name in program.outputs:
        d = program.definition(name)
        if d is not None and d.extents is not None:
            outs.append(_decl(name, d.extents))
        else:
            outs.append(name)
    if outs:
        lines.append("output " + ", ".join(outs))
    locs = [
        _decl(d.name, d.extents)
        for d in program.definitions
        if d.name not in program.outputs and d.extents is not None
    ]
    if locs:
        lines.append("local " + ", ".join(locs))
    lines.extend(f"assume {format_cond(a.cond)}" for a in getattr(program, "assumptions", ()))
    printer = ExprPrinter()
    for d in program.definitions:
        lhs = d.name if not d.indices else f"{d.name}[{', '.join(d.indices)}]"
        body = printer.expr(d.body)
        if isinstance(d.body, MatrixFn) and d.indices:
            body += f"[{', '.join(d.indices)}]"  # the one place a matrix function is written
        lines.append(f"{lhs} = {body}")
    return "\n".join(lines) + "\n"
