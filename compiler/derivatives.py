"""Jacobians, Hessians and Jacobian-vector products as programs and as compiled callables.

    H = tcc.hessian("examples/quadratic_form.tcc", of="f", wrt="x")
    print(H.program)            # dx2[i, j] = A[i, j] + A[j, i]: no sum, no seed
    H(x=x, A=A)                 # the (n, n) Hessian, compiled with llvmlite

The Jacobian is the reverse-mode derivative with the seed ``df`` replaced by
Kronecker deltas (Urban and van der Smagt, sec. 5.3; ``autodiff{seed=delta}``): the sum over
f's domain collapses, so the program computes every entry directly, and the
index solver removes the deltas the derivative rules introduce.  The Hessian
is the Jacobian of the Jacobian (the derivative language is closed), which is
how Laue et al. get compact expressions where frameworks run one
Hessian-vector product per row.  The JVP is forward mode
(``autodiff{mode=forward}``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tcc.api import derivative_target
from tcc.ir.diagnostics import TccError
from tcc import pipeline as _pipeline

__all__ = ["jacobian_program", "hessian_program", "jvp_program", "jacobian", "hessian", "jvp", "Derivative"]


def _run(program: Any, of: str, wrt: Sequence[str], mode: str, seed: str, instruments: Sequence[Any]) -> Any:
    return _pipeline.run_pipeline(program, _pipeline.derivative_pipeline(of, wrt, mode, seed), instruments=instruments)


def jacobian_program(program: Any, of: str | None = None, wrt: str | Sequence[str] | None = None,
                     instruments: Sequence[Any] = ()) -> Any:
    """The program of the full Jacobian ``d of / d x`` for each x in ``wrt`` (f's indices first)."""
    program, of, wrt = derivative_target(program, of, wrt)
    return _run(program, of, wrt, "reverse", "delta", instruments)


def hessian_program(program: Any, of: str | None = None, wrt: str | None = None,
                    instruments: Sequence[Any] = ()) -> Any:
    """The program of the Hessian of ``of`` w.r.t. one input x: shape f + x + x."""
    program, of, names = derivative_target(program, of, wrt)
    if len(names) != 1:
        raise TccError(f"a Hessian is taken with respect to one input, not {len(names)} ({', '.join(names)})")
    first = _run(program, of, names, "reverse", "delta", instruments)
    (grad,) = first.outputs
    return _run(first, grad, names, "reverse", "delta", instruments)


def jvp_program(program: Any, of: str | None = None, wrt: str | Sequence[str] | None = None,
                instruments: Sequence[Any] = ()) -> Any:
    """The forward-mode program: tangent inputs ``dx`` (x's shape) give ``df`` = Σ J_x · dx."""
    program, of, wrt = derivative_target(program, of, wrt)
    return _run(program, of, wrt, "forward", "input", instruments)


@dataclass(frozen=True)
class Derivative:
    """A compiled derivative: ``D(**inputs)`` returns its array (a dict by input name for several)."""

    program: Any       # the derivative program (print it to see the expression)
    compiled: Any      # the :class:`tcc.runtime.compiled.CompiledProgram`
    results: dict[str, str]  # what the call returns: key -> definition

    def __call__(self, **arrays: Any) -> Any:
        values = self.compiled(**arrays)
        out = {key: values[name] for key, name in self.results.items()}
        return next(iter(out.values())) if len(out) == 1 else out

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.program.caller_inputs())

    def __str__(self) -> str:
        return str(self.program)


def _compiled(program: Any, results: dict[str, str], target: str, dtype: Any, threads: int | None,
              passes: Any) -> Derivative:
    from tcc.build import build

    return Derivative(program, build(program, target=target, dtype=dtype, passes=passes, threads=threads), results)


def jacobian(program: Any, of: str | None = None, wrt: str | Sequence[str] | None = None, *, target: str = "cpu",
             dtype: Any = "float64", threads: int | None = None, passes: Any = None) -> Derivative:
    """The compiled Jacobian: ``J(**inputs)`` is an array of shape f + x (a dict by x for several)."""
    program, of, names = derivative_target(program, of, wrt)
    dp = jacobian_program(program, of, names)
    return _compiled(dp, dict(zip(names, dp.outputs)), target, dtype, threads, passes)


def hessian(program: Any, of: str | None = None, wrt: str | None = None, *, target: str = "cpu",
            dtype: Any = "float64", threads: int | None = None, passes: Any = None) -> Derivative:
    """The compiled Hessian: ``H(**inputs)`` is an array of shape f + x + x."""
    program, of, names = derivative_target(program, of, wrt)
    dp = hessian_program(program, of, names)
    return _compiled(dp, {names[0]: dp.outputs[0]}, target, dtype, threads, passes)


def jvp(program: Any, of: str | None = None, wrt: str | Sequence[str] | None = None, *, target: str = "cpu",
        dtype: Any = "float64", threads: int | None = None, passes: Any = None) -> Derivative:
    """The compiled Jacobian-vector product: ``T(**inputs, dx=...)`` is the tangent of f."""
    program, of, names = derivative_target(program, of, wrt)
    dp = jvp_program(program, of, names)
    return _compiled(dp, {of: dp.outputs[0]}, target, dtype, threads, passes)
