"""``tcc.jax.function``: a tcc program as a differentiable JAX function.

    f = tcc.jax.function(open("examples/urban.tcc").read())
    out = f(a=a, b=b, c=c, d=d)                          # jax arrays in, {"f": array} out
    jax.grad(lambda a: f(a=a, b=b, c=c, d=d)["f"])(a)    # runs tcc's own compiled VJP program

Why it is built this way:

* **A ``jax.custom_vjp`` around ``jax.pure_callback``.**  JAX cannot trace
  into compiled tcc code, so the forward is a host callback whose result
  shapes come from the input shapes (tcc's size binding, at trace time);
  the callback is *pure* (no side effects), so ``jax.jit`` may move or drop
  it.  Everything that can be checked at trace time is (names, dtypes,
  shapes), so a bad call fails with tcc's message, not inside XLA.
* **The backward is tcc's derivative program, not JAX's.**  For each result
  whose cotangent is not a symbolic zero (``symbolic_zeros=True``), the
  backward calls ``tcc.grad(source, of=y, wrt=<the perturbed float
  inputs>)`` with the cotangent as its seed ``dy``; contributions add up.
* **Any order.**  That derivative program is wrapped by this module again
  (a ``JaxFunction`` of its own, with its own ``custom_vjp``), so the
  backward is differentiable: a second ``jax.grad`` or
  ``check_grads(order=2, modes=["rev"])`` runs tcc's second-order program.
  Forward mode (``jax.jvp``, ``jacfwd``) is not defined: JAX refuses it for
  a ``custom_vjp`` function.
* **vmap loops.**  The callbacks use ``vmap_method="sequential"``: a tcc
  program has inputs of fixed rank, so a batched call has no program to run;
  JAX calls the compiled program once per batch element (on the host, one
  after the other).  A batched program (an extra leading size) would be
  faster for large batches of small problems and is not built.
* **float64 needs JAX's 64-bit mode** (``jax.config.update("jax_enable_x64",
  True)``): without it JAX makes every array float32, so a float64 function
  is refused with a message saying so rather than silently run in float32.
* **Index inputs** (``index tok[n] < v``) are integer arrays (int32 or
  int64), validated by the compiled program, and get no cotangent.

Arrays cross to the host and back through the callback (JAX owns its
buffers, so this is a copy per call; on the CPU backend it is a memcpy).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tcc.integrations.common import FrameworkFunction, framework, program_source
from tcc.ir.diagnostics import TccError
from tcc.sizes import bind_sizes, extents_shape

__all__ = ["function", "JaxFunction"]


def _jax() -> Any:
    return framework("jax", "tcc.jax needs JAX: pip install 'tcc[jax]'")


class JaxFunction(FrameworkFunction):
    """A tcc program callable on JAX arrays by keyword, differentiable by ``jax.grad`` (reverse mode).

    Made by :func:`function`; ``inputs`` and ``results`` name what it takes
    and returns.  The compiled programs and each dtype's ``custom_vjp``
    function are made on first use and kept by the instance.
    """

    api = "tcc.jax.function"

    def __init__(self, source: Any, dtype: str | None) -> None:
        super().__init__(source, dtype)
        self._applies: dict[str, Any] = {}
        defs = {d.name: d for d in self.program.definitions}
        self._result_extents = tuple(defs[r].extents for r in self.results)

    def _wrap(self, program: Any) -> "JaxFunction":
        return JaxFunction(program, self.dtype)

    # -- calls ---------------------------------------------------------------
    def __call__(self, **arrays: Any) -> dict[str, Any]:
        jax = _jax()
        self.check_names(arrays)
        for name, a in arrays.items():
            if not isinstance(a, (jax.Array, np.ndarray)):  # a tracer is a jax.Array too
                raise TypeError(f"input '{name}' must be a jax.Array or a NumPy array, got {type(a).__name__}")
        dtype = self.dtype_from({n: str(a.dtype) for n, a in arrays.items()})
        self._check_dtypes(arrays, dtype)
        xs = [jax.numpy.asarray(arrays[n]) for n in self.inputs]
        bind_sizes(self.program, dict(zip(self.inputs, xs)))  # shapes: tcc's message at trace time
        return dict(zip(self.results, self._apply(dtype)(*xs)))

    def _check_dtypes(self, arrays: dict[str, Any], dtype: str) -> None:
        jax = _jax()
        if dtype == "float64" and not jax.config.jax_enable_x64:
            raise TccError("float64 needs JAX's 64-bit mode: jax.config.update(\"jax_enable_x64\", True) "
                           "before making arrays (or use float32)")
        for name, a in arrays.items():
            kind = np.dtype(a.dtype)
            if name in self.index_inputs:
                if kind.kind not in "iu":
                    raise TccError(f"index input '{name}' must be an integer array (int64 or int32), got dtype {kind}")
            elif kind != np.dtype(dtype):
                raise TccError(f"input '{name}' has dtype {kind}, but this {self.api} runs {dtype}")

    def result_shapes(self, xs: Sequence[Any]) -> tuple[tuple[int, ...], ...]:
        """The shape of every result for inputs of the shapes of ``xs`` (arrays or tracers)."""
        sizes = bind_sizes(self.program, dict(zip(self.inputs, xs)))
        return tuple(extents_shape(e, sizes) for e in self._result_extents)

    def _apply(self, dtype: str) -> Any:
        with self._lock:
            if dtype not in self._applies:
                self._applies[dtype] = _make_apply(self, dtype)
            return self._applies[dtype]

    def host(self, dtype: str, arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """The compiled program on the host arrays a callback receives (positional, in ``inputs`` order)."""
        out = self.run(dtype, {n: np.asarray(a, order="C") for n, a in zip(self.inputs, arrays)})  # keeps 0-d arrays 0-d
        return tuple(out[r] for r in self.results)


def _callback(fn: JaxFunction, dtype: str, xs: Sequence[Any]) -> tuple[Any, ...]:
    """The forward as a ``pure_callback``: results of the shapes tcc's sizes give, looped under vmap."""
    jax = _jax()
    types = tuple(jax.ShapeDtypeStruct(s, np.dtype(dtype)) for s in fn.result_shapes(xs))
    return tuple(jax.pure_callback(lambda *a: fn.host(dtype, a), types, *xs, vmap_method="sequential"))


def _make_apply(fn: JaxFunction, dtype: str) -> Any:
    """``fn``'s program at ``dtype`` as a ``custom_vjp`` function of the inputs (positional) to the results."""
    jax = _jax()
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_vjp
    def apply(*xs: Any) -> tuple[Any, ...]:
        return _callback(fn, dtype, xs)

    def fwd(*primals: Any) -> tuple[tuple[Any, ...], Any]:
        values = tuple(p.value for p in primals)  # symbolic_zeros: CustomVJPPrimal(value, perturbed)
        # apply, not the bare callback: under an outer derivative (reverse over reverse) the
        # primal results are differentiated too, and a pure_callback has no derivative of its own
        return apply(*values), (values, tuple(p.perturbed for p in primals))

    def bwd(res: Any, cotangents: Sequence[Any]) -> tuple[Any, ...]:
        values, perturbed = res
        wrt = tuple(n for n, p in zip(fn.inputs, perturbed) if p and n not in fn.index_inputs)
        by_name = dict(zip(fn.inputs, values))
        total: dict[str, Any] = {}
        for of, g in zip(fn.results, cotangents):
            if not wrt or isinstance(g, SymbolicZero):
                continue
            vjp, seed, dnames = fn.derivative(of, wrt)
            got = vjp(**by_name, **{seed: g})  # a JaxFunction: differentiable again
            for x, d in zip(wrt, dnames):
                total[x] = got[d] if x not in total else total[x] + got[d]
        return tuple(total.get(n) for n in fn.inputs)  # None: a zero cotangent (index inputs, unperturbed)

    apply.defvjp(fwd, bwd, symbolic_zeros=True)
    return apply


def function(source: Any, *, dtype: Any = None) -> JaxFunction:
    """A tcc program (text, a path's text or a Program) as a differentiable function of JAX arrays.

    ``dtype`` (``float64`` / ``float32``) fixes the element type; ``None``
    takes it from the float inputs at each call (float64 needs
    ``jax_enable_x64``).
    """
    return JaxFunction(program_source(source), None if dtype is None else str(np.dtype(dtype)))
