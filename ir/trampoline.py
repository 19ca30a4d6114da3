"""Visitors over deep trees without deep recursion: :func:`trampoline` runs generator steps on an explicit stack.

Kept out of :mod:`tcc.ir.expr` (which re-exports both names) because it
knows nothing of expression nodes: any visitor -- the interpreter's, a
pass's -- can be written this way.
"""
from __future__ import annotations

from typing import Any, Generator

__all__ = ["Step", "trampoline"]

#: A visitor step: a generator that yields the sub-steps whose results it
#: needs (each one is sent back as the value of its ``yield``) and returns
#: its own result.
Step = Generator["Step", Any, Any]


def trampoline(step: Step) -> Any:
    """Run a visitor written as generators, with an explicit stack.

    A flat sum of n terms is a left-deep tree n levels deep, and passes build
    chains as long (an adjoint collects one term per use of a tensor), so a
    recursive visitor overflows Python's stack (about 1,000 frames) or,
    with the limit raised, the C stack.  Written as generators, a visitor
    keeps its recursive shape: where it would call ``self.visit(child)`` it
    writes ``yield self.visit(child)``, and this loop, not the interpreter's
    stack, holds the pending frames.  Exceptions travel back up through the
    generators as if they were ordinary calls, so ``try``/``finally`` in a
    step still runs.  (A step must not ``yield from`` another: delegation
    nests C frames again.)
    """
    stack: list[Step] = [step]
    value: Any = None
    error: BaseException | None = None
    while stack:
        top = stack[-1]
        try:
            request = top.throw(error) if error is not None else top.send(value)
        except StopIteration as done:
            stack.pop()
            value, error = done.value, None
            continue
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's step, or below
            stack.pop()
            if not stack:
                raise
            value, error = None, exc
            continue
        stack.append(request)
        value, error = None, None
    return value
