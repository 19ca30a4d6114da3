"""Contraction orders re-decided at call time, where the call's sizes change the answer.

``contract-order`` chooses the pairwise order of a sum over three or more
factors at compile time, and for a symbolic size it can only guess
(``symbolic-size``, 1000).  For the chain ``D[i, l] = sum[j, k](A[i, j] *
B[j, k] * C[k, l])`` the right order depends on the shapes: with ``A[200,
3]``, ``B[3, 200]``, ``C[200, 3]`` summing ``k`` first (``A (B C)``) costs
2 * 3.6k multiply-adds and ``(A B) C`` 2 * 240k; with the transposed shapes it
is the other way round.  One compiled program serves every size, so the
order it was compiled with can be 60x worse than the one the call needs.

:class:`CallTimeOrder` is attached by :func:`tcc.build.build` to a program
whose pipeline runs ``contract-order`` (without a ``sizes`` option) and in
which some candidate sum has a symbolic extent.  At a call it binds the
sizes from the input shapes, asks the pass's planner
(:class:`tcc.passes.contract_order.OrderPlanner`) what order these sizes
choose, and -- when the compiled order would cost at least ``min-gain`` (2)
times the FLOPs of that one at these sizes -- runs a variant compiled with
``contract-order{sizes=...}``: the same pipeline, estimating with the call's
sizes.  Variants are compiled on first need and kept per order (not per
size), so a program called with many shapes compiles at most one variant
per distinct order; the decision itself is cached per distinct sizes.  The
variant returns the same results (intermediates stay hidden), is checked by
the same argument checks, and uses the caller's ``threads``.
"""
from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable, Mapping

from tcc.passes.contract_order import ContractOrder, OrderPlanner
from tcc.passes.pass_base import Pass
from tcc.pipeline import run_pipeline

__all__ = ["CallTimeOrder", "call_time_order"]

#: decisions remembered per program (distinct size tuples); beyond, decided again each call
MAX_DECISIONS = 256


class CallTimeOrder:
    """The variants of one compiled program by contraction order (see the module docstring)."""

    def __init__(self, program: Any, passes: list[Pass], position: int,
                 compile_variant: Callable[[list[Pass]], Any]) -> None:
        self.program = program
        self.passes = passes                 # the L1/L2 part of the pipeline, contract-order at ``position``
        self.position = position
        self.compile_variant = compile_variant
        self.lock = threading.Lock()
        self._planner: OrderPlanner | None = None
        self._default: Any = None
        self.decisions: dict[tuple[int, ...], Any] = {}
        self.variants: dict[Any, Any] = {}

    @property
    def pass_(self) -> ContractOrder:
        p = self.passes[self.position]
        assert isinstance(p, ContractOrder)
        return p

    def planner(self) -> OrderPlanner:
        """The planner over what ``contract-order`` sees: the passes before it run once, on first need."""
        if self._planner is None:
            # the compile ran (and verified, if asked) these passes on this program already
            staged = run_pipeline(self.program, self.passes[:self.position], verify_plugins=False) \
                if self.position else self.program
            self._planner = OrderPlanner(staged, self.pass_)
            self._default = self._planner.choose({})
        return self._planner

    def decide(self, sizes: Mapping[str, int]) -> Any:
        """The order to run at ``sizes``: None for the compiled one, else the plan of a variant."""
        planner = self.planner()
        key = tuple(sizes.get(n, -1) for n in planner.sizes)
        if key in self.decisions:
            return self.decisions[key]
        best = planner.choose(sizes)
        gain = self.pass_.min_gain
        chosen = None
        if best != self._default and planner.cost(self._default, sizes) >= gain * max(1, planner.cost(best, sizes)):
            chosen = best
        if len(self.decisions) < MAX_DECISIONS:
            self.decisions[key] = chosen
        return chosen

    def variant(self, sizes: Mapping[str, int]) -> Any:
        """The compiled program to run at ``sizes`` instead of the default one, or None."""
        with self.lock:
            plan = self.decide(sizes)
            if plan is None:
                return None
            found = self.variants.get(plan)
            if found is None:
                known = ",".join(f"{n}:{sizes[n]}" for n in self.planner().sizes if n in sizes)
                passes = list(self.passes)
                passes[self.position] = replace(self.pass_, sizes=known)
                found = self.variants[plan] = self.compile_variant(passes)
            return found


def call_time_order(program: Any, passes: list[Pass], compile_variant: Callable[[list[Pass]], Any]) -> CallTimeOrder | None:
    """A :class:`CallTimeOrder` for ``program`` compiled with ``passes`` (the L1/L2 part), or None when sizes cannot matter.

    None when the pipeline has no ``contract-order``, or one with ``sizes``
    given, or the program has no size names at all.  Whether a candidate
    sum actually has a symbolic extent is found on the first call (running
    the passes before ``contract-order`` costs milliseconds, not worth
    paying at compile time for programs never called).
    """
    positions = [k for k, p in enumerate(passes) if isinstance(p, ContractOrder)]
    if len(positions) != 1 or passes[positions[0]].sizes or not getattr(program, "sizes", lambda: ())():
        return None
    return CallTimeOrder(program, passes, positions[0], compile_variant)
