"""Central finite-difference check of symbolic derivatives.

For ``d of / d x`` the derivative program computes the gradient of the
scalar ``l(x) = sum(seed * f(x))`` with a random seed tensor ``seed`` (the
new input ``d<of>`` of the derivative program).  We compare it with central
differences ``(l(x + eps v) - l(x - eps v)) / (2 eps)``: along every unit
vector ``e_i`` when x has at most 512 elements, else along 64 random unit
vectors ``e_i`` plus 16 random unit-norm directions ``v`` (then the analytic
value is ``<grad, v>``).

The error reported per wrt tensor is **normwise**:

    max_i |an_i - fd_i| / max(max_i |fd_i|, 1e-12)

Why normwise and not elementwise: a correct gradient has entries that are
exactly or nearly zero (guards, deltas, cancellation); there the finite
difference is pure truncation and round-off noise (~eps**2 * f''' +
ulp(l) / eps), and dividing by the tiny entry itself would report huge
"errors" for a right answer.  Scaling every deviation by the largest
gradient entry measures the error relative to the gradient's magnitude,
which is what the round-off of both sides is proportional to.  The 1e-12
floor keeps an all-zero gradient comparable (then the error is absolute).

Everything is computed in float64.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tcc.index_inputs import random_index_inputs
from tcc.ir.diagnostics import TccError
from tcc.passes.infer_ranges import InferRanges
from tcc.pipeline import derivative_pipeline, run_pipeline
from tcc.sizes import check_allocations, extents_shape
from tcc.targets import available_targets

DEFAULT_SIZES = (5, 4, 6, 3, 7)
FULL_CHECK_LIMIT = 512
SAMPLED_ELEMENTS = 64
SAMPLED_DIRECTIONS = 16


@dataclass
class CheckResult:
    """The outcome for one wrt tensor."""

    wrt: str                # the input differentiated by, e.g. "a"
    gradient: str           # its gradient definition in the derivative program, e.g. "da"
    max_rel_error: float    # normwise: max|an - fd| / max(max|fd|, 1e-12)
    max_abs_error: float    # max|an - fd|
    elements: int           # unit vectors checked
    directions: int         # random directions checked (0 for a full check)
    tol: float
    ok: bool
    analytic: np.ndarray = field(default=None, repr=False)   # type: ignore[assignment]
    numeric: np.ndarray = field(default=None, repr=False)    # type: ignore[assignment]

    @property
    def checked(self) -> str:
        if self.directions:
            return f"{self.elements} elements and {self.directions} directions checked"
        return f"{self.elements} element{'s' if self.elements != 1 else ''} checked"

    def __str__(self) -> str:
        status = "ok" if self.ok else "FAILED"
        return f"{self.gradient}: max relative error {self.max_rel_error:.1e} ({self.checked}) {status}"


def default_sizes(names: Sequence[str]) -> dict[str, int]:
    """5, 4, 6, 3, 7, then 5, 4, ... again, for the size names in order."""
    return {n: s for n, s in zip(names, itertools.cycle(DEFAULT_SIZES))}


def _shape(extents: Any, sizes: Mapping[str, int], what: str) -> tuple[int, ...]:
    try:
        shape = extents_shape(extents, sizes)
    except KeyError as exc:
        raise TccError(f"extents of {what} use an unbound size {exc}") from None
    if any(s < 0 for s in shape):
        raise TccError(f"{what} gets a negative extent {shape} with sizes {dict(sizes)}")
    return shape


def derivative_program(program: Any, of: str, wrt: Sequence[str], passes: Any = None, instruments: Sequence[Any] = ()) -> Any:
    """Run ``infer-ranges`` then the derivative pipeline (the default one, or ``passes``) on ``program``."""
    src = run_pipeline(program, [InferRanges()])
    return src, run_pipeline(src, derivative_pipeline(of, wrt, passes=passes), instruments=instruments)


def check_gradients(
    program: Any,
    of: str,
    wrt: Sequence[str] | str,
    *,
    seed: int = 0,
    eps: float = 1e-6,
    tol: float = 1e-6,
    sizes: Mapping[str, int] | None = None,
    low: float = 0.25,
    high: float = 0.75,
    target: str = "cpu",
) -> list[CheckResult]:
    """Check ``d of / d x`` for each x in ``wrt`` against central differences.

    ``program`` is an L1 Program (text: see :func:`tcc.api.check`).  Inputs
    are drawn uniform in [low, high] with ``numpy.random.default_rng(seed)``;
    ``sizes`` binds size names (missing ones get :func:`default_sizes`).
    Returns one :class:`CheckResult` per wrt tensor, in wrt order.

    ``target="cpu"`` (the default) checks the code a user would run: the
    derivative program and the function itself are compiled (float64), so a
    wrong lowering fails the check just like a wrong derivative.
    ``target="reference"`` evaluates both with the reference interpreter;
    ``cuda`` (a GPU) and ``cuda-sim`` check the GPU backend's code instead.
    Elements of ``of`` that are not finite at the drawn inputs (a ``max``
    over an empty range is -inf) have no derivative there and are left out.
    """
    wrt = _checked_arguments(program, of, wrt, eps, tol)
    src, deriv = derivative_program(program, of, wrt)
    # derived programs may leave sums for infer-ranges (as a printed, re-parsed one would)
    deriv = run_pipeline(deriv, [InferRanges()])
    bound = _bound_sizes(src, sizes)
    seed_decl, grads = _seed_and_gradients(src, deriv, wrt)

    rng = np.random.default_rng(seed)
    shapes = {decl.name: _shape(decl.extents, bound, f"input '{decl.name}'") for decl in src.inputs}
    seed_shape = _shape(seed_decl.extents, bound, f"seed input '{seed_decl.name}'")
    check_allocations([("input", n, shape, 8) for n, shape in shapes.items()] + [("seed input", seed_decl.name, seed_shape, 8)])
    inputs: dict[str, Any] = {}
    for decl in src.inputs:
        if not decl.is_index:
            inputs[decl.name] = rng.uniform(low, high, size=shapes[decl.name]).astype(np.float64)
    inputs.update(random_index_inputs(src, bound, rng))  # integers in their declared ranges, never perturbed
    seed_arr = rng.uniform(low, high, size=seed_shape).astype(np.float64)

    run = _runner(target, src, deriv)
    # elements of `of` that are not finite at the inputs (a max over an empty CSR row is -inf) have no
    # derivative there, and their difference quotient is nan: they are left out (seed 0 in both)
    left_out = ~np.isfinite(np.asarray(run(src, inputs)[of], dtype=np.float64))
    seed_arr = np.where(left_out, 0.0, seed_arr)
    analytic_all = run(deriv, {**inputs, seed_decl.name: seed_arr})

    def loss(arrays: Mapping[str, np.ndarray]) -> float:
        f = np.asarray(run(src, arrays)[of], dtype=np.float64)
        return float(np.sum(seed_arr * np.where(left_out, 0.0, f)))

    return [_check_one(x, gname, analytic_all[gname], inputs, loss, rng, eps, tol) for x, gname in zip(wrt, grads)]


def _checked_arguments(program: Any, of: str, wrt: Sequence[str] | str, eps: float, tol: float) -> list[str]:
    """``wrt`` as a list, after refusing what would make the check meaningless."""
    if isinstance(wrt, str):
        wrt = [w.strip() for w in wrt.split(",") if w.strip()]
    wrt = list(wrt)
    if not wrt:
        raise TccError("nothing to check: no tensor given to differentiate with respect to")
    # `eps <= 0` alone lets NaN through (every comparison with NaN is false)
    if not (math.isfinite(eps) and eps > 0):
        raise TccError(f"the finite-difference step must be a finite number above 0, got {eps}")
    if not (math.isfinite(tol) and tol > 0):
        raise TccError(f"the tolerance must be a finite number above 0, got {tol}")
    if program.definition(of) is None:
        raise TccError(f"'{of}' is not a definition of the program")
    for x in wrt:
        if program.input(x) is None:
            raise TccError(f"'{x}' is not an input of the program")
    return wrt


def sizes_for(src: Any, sizes: Mapping[str, int] | None = None) -> dict[str, int]:
    """Every size of ``src``: the given ones, the defaults for the rest, moved to meet its ``assume`` lines."""
    return _bound_sizes(src, sizes)


def _bound_sizes(src: Any, sizes: Mapping[str, int] | None) -> dict[str, int]:
    """Every size of ``src``: the given ones, the defaults for the rest."""
    names = src.sizes()
    bound = default_sizes(names)
    for k, v in (sizes or {}).items():
        if k not in names:
            known = ", ".join(names) if names else "none"
            raise TccError(f"unknown size '{k}' (program sizes: {known})")
        if int(v) < 0:
            raise TccError(f"size '{k}' must be non-negative, got {v}")
        bound[k] = int(v)
    return _meet_assumptions(src, bound, set(sizes or {}))


def _meet_assumptions(src: Any, bound: dict[str, int], given: set[str]) -> dict[str, int]:
    """The sizes, with the defaulted ones moved (1..8, nearest the defaults first) until every ``assume`` holds.

    ``assume m >= n`` with the defaults n = 5, m = 4 would fail the check's
    own call; a small search finds n = 4, m = 4 instead.  Sizes the user
    gave stay; if nothing in range works, the call reports the violated
    assumption.
    """
    assumptions = getattr(src, "assumptions", ())
    if all(a.cond.evaluate(bound) for a in assumptions):
        return bound
    free = [n for n in bound if n not in given][:4]
    options = [sorted(range(1, 9), key=lambda v, d=bound[n]: (abs(v - d), v)) for n in free]
    for values in sorted(itertools.product(*options), key=lambda vs: sum(abs(v - bound[n]) for n, v in zip(free, vs))):
        trial = {**bound, **dict(zip(free, values))}
        if all(a.cond.evaluate(trial) for a in assumptions):
            return trial
    return bound


def _seed_and_gradients(src: Any, deriv: Any, wrt: Sequence[str]) -> tuple[Any, list[str]]:
    """The seed (the one input of the derivative program the source lacks) and the gradients,
    one per wrt tensor: a pipeline given by the user may produce something else."""
    new_inputs = [d for d in deriv.caller_inputs() if src.input(d.name) is None]
    if len(new_inputs) != 1:
        raise TccError(
            "cannot find the seed input of the derivative program: new inputs "
            + (", ".join(d.name for d in new_inputs) or "none")
        )
    grads = list(deriv.outputs)
    if len(grads) != len(wrt):
        raise TccError(
            f"the derivative program declares outputs {', '.join(grads) or 'none'}, expected one per wrt tensor "
            f"({', '.join(wrt)})"
        )
    return new_inputs[0], grads


_Run = Callable[[Any, Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


def _runner(target: str, src: Any, deriv: Any) -> _Run:
    """How the function and its derivative program are evaluated: compiled for ``target``, or the
    reference interpreter.  Both are compiled once, before the first evaluation."""

    def pack(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        return {k: (float(v) if v.ndim == 0 else v) for k, v in arrays.items()}

    if target == "reference":
        from tcc.reference.interpreter import evaluate

        def run(program: Any, arrays: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
            return evaluate(program, pack(arrays), np.float64)
    elif target in available_targets():  # built-in, registered or plug-in
        from tcc.build import build

        compiled = {id(src): build(src, target=target), id(deriv): build(deriv, target=target)}

        def run(program: Any, arrays: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
            return compiled[id(program)](**{k: v if v.dtype.kind == "i" else np.require(v, np.float64, "C")
                                            for k, v in arrays.items()})  # index inputs stay integers
    else:
        raise TccError(f"unknown check target '{target}' (choose {', '.join(available_targets())} or reference)")
    return run


def _directions(rng: np.random.Generator, x0: np.ndarray) -> tuple[list[tuple[str, Any]], int, int]:
    """``(directions, elements, random directions)``: every unit vector of a small tensor; of a
    large one, 64 random unit vectors and 16 random unit-norm directions."""
    n = x0.size
    if n <= FULL_CHECK_LIMIT:
        return [("e", i) for i in range(n)], n, 0
    picks = rng.choice(n, size=SAMPLED_ELEMENTS, replace=False)
    directions: list[tuple[str, Any]] = [("e", int(i)) for i in picks]
    for _ in range(SAMPLED_DIRECTIONS):
        v = rng.standard_normal(x0.shape)
        directions.append(("v", v / np.linalg.norm(v)))
    return directions, SAMPLED_ELEMENTS, SAMPLED_DIRECTIONS


def _check_one(
    x: str,
    gname: str,
    analytic: Any,
    inputs: Mapping[str, np.ndarray],
    loss: Callable[[Mapping[str, np.ndarray]], float],
    rng: np.random.Generator,
    eps: float,
    tol: float,
) -> CheckResult:
    """The gradient ``gname`` of the input ``x`` against central differences of ``loss``."""
    x0 = inputs[x]
    grad = np.asarray(analytic, dtype=np.float64)
    if grad.shape != x0.shape:
        raise TccError(f"gradient '{gname}' has shape {grad.shape} but '{x}' has shape {x0.shape}")
    directions, n_elems, n_dirs = _directions(rng, x0)
    an = np.empty(len(directions))
    fd = np.empty(len(directions))
    flat_grad = grad.reshape(-1)
    for j, (kind, d) in enumerate(directions):
        if kind == "e":
            step = np.zeros(x0.size)
            step[d] = eps
            step = step.reshape(x0.shape)
            an[j] = flat_grad[d]
        else:
            step = eps * d
            an[j] = float(np.sum(grad * d))
        plus = loss({**inputs, x: x0 + step})
        minus = loss({**inputs, x: x0 - step})
        fd[j] = (plus - minus) / (2 * eps)
    if len(directions):
        abs_err = float(np.max(np.abs(an - fd)))
        scale = max(float(np.max(np.abs(fd))), 1e-12)
    else:
        abs_err, scale = 0.0, 1e-12
    rel = abs_err / scale
    ok = bool(np.isfinite(rel) and rel <= tol)
    return CheckResult(x, gname, rel, abs_err, n_elems, n_dirs, tol, ok, an, fd)
