"""What ``tcc.torch`` and ``tcc.jax`` share: a tcc program as a function of a framework's arrays.

Both wrap a program so that the framework's autodiff runs tcc's own derivative
programs.  The parts that do not depend on the framework live here, so the
two behave alike: how the source is read, which dtypes are allowed, how a
call's names are checked (the same messages), how the element type follows
from the float inputs, and how the compiled forward and the VJP programs are
made once and kept.  Each framework module subclasses :class:`FrameworkFunction`
and says how a derivative program is wrapped again (:meth:`_wrap`), so that
the derivative of the derivative is tcc's next-order program.
"""
from __future__ import annotations

import importlib
import os

import threading
from typing import Any, Iterable, Mapping

import numpy as np

from tcc.backends.target import DTYPES
from tcc.ir.diagnostics import TccError

__all__ = ["DTYPES", "FrameworkFunction", "framework", "program_source"]


def framework(module: str, missing: str) -> Any:
    """``import module``, imported only when a function is called (the integrations' frameworks
    are optional extras); ``missing`` is the ImportError's message, saying what to install."""
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - each framework is an optional extra
        raise ImportError(missing) from None


def program_source(source: Any) -> Any:
    """The program text where ``source`` is a path as :func:`tcc.parse` reads one (a ``PathLike``,
    or a one-line string naming a file or ending in ``.tcc``: :func:`tcc.api.is_source_path`);
    anything else (text, a parsed program) as given.  The function keeps text, not the path, so
    that it pickles and compiles the same wherever it is loaded."""
    from tcc.api import is_source_path, read_source

    if isinstance(source, os.PathLike) or (isinstance(source, str) and source != "-" and is_source_path(source)):
        return read_source(source)[0]
    return source


class FrameworkFunction:
    """A tcc program with the bookkeeping of a differentiable framework function.

    ``inputs`` (what a caller passes), ``index_inputs`` (integer inputs: no
    gradient) and ``results`` (what a call returns) come from the program.
    Compiled programs are kept per dtype, derivative programs per
    (result, inputs) pair; both are made on first use, under a lock, since
    frameworks may call from several threads.
    """

    #: the public name, for messages (``tcc.torch.function``)
    api = "tcc.function"

    def __init__(self, source: Any, dtype: str | None) -> None:
        import tcc

        if dtype is not None and str(dtype) not in DTYPES:
            raise ValueError(f"dtype must be float64, float32 or None (that of the inputs), not {dtype!r}")
        self.program = tcc.transform(source) if not hasattr(source, "definitions") else source
        self.dtype = None if dtype is None else str(dtype)
        self.inputs: tuple[str, ...] = tuple(d.name for d in self.program.caller_inputs())
        self.index_inputs = frozenset(d.name for d in self.program.inputs if d.is_index)
        self.results: tuple[str, ...] = tuple(self.program.results())
        self._compiled: dict[str, Any] = {}
        self._derivatives: dict[tuple[str, tuple[str, ...]], tuple[Any, str, tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<{self.api}: inputs {', '.join(self.inputs) or '-'}; results {', '.join(self.results)}>"

    # -- what a framework module provides ------------------------------------
    def _compile(self, dtype: str) -> Any:
        """The compiled program for ``dtype`` (the framework module picks target and threads). It returns
        only the declared results: the other definitions are intermediates that ``rematerialize`` may
        recompute or drop, and whose memory is kept between calls."""
        import tcc

        return tcc.compile(self.program, "cpu", dtype=dtype, results=self.results)

    def _wrap(self, program: Any) -> "FrameworkFunction":
        """A derivative program wrapped like this one, so that it is differentiable in turn."""
        raise NotImplementedError

    # -- compiled programs -----------------------------------------------------
    def compiled(self, dtype: str) -> Any:
        with self._lock:
            if dtype not in self._compiled:
                self._compiled[dtype] = self._compile(dtype)
            return self._compiled[dtype]

    def derivative(self, of: str, wrt: tuple[str, ...]) -> tuple[Any, str, tuple[str, ...]]:
        """The VJP of ``of`` w.r.t. ``wrt`` wrapped by :meth:`_wrap`, its seed input, and its result per ``wrt``."""
        import tcc

        key = (of, wrt)
        with self._lock:
            if key not in self._derivatives:
                g = tcc.grad(self.program, of=of, wrt=list(wrt))
                seed = next(d.name for d in g.caller_inputs() if d.name not in self.inputs)
                self._derivatives[key] = (self._wrap(g), seed, tuple(g.results()))
            return self._derivatives[key]

    def run(self, dtype: str, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The compiled program on NumPy arrays: the results it declares."""
        out = self.compiled(dtype)(**arrays)
        return {n: out[n] for n in self.results}

    # -- checks shared by the frameworks ---------------------------------------
    def check_names(self, given: Iterable[str]) -> None:
        """Refuse unknown and missing inputs (the messages of a compiled program's call)."""
        given = list(given)
        unknown = [n for n in given if n not in self.inputs]
        if unknown:
            raise TccError(f"unknown input{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                           f"(inputs: {', '.join(self.inputs) or 'none'})")
        missing = [n for n in self.inputs if n not in given]
        if missing:
            raise TccError(f"missing input{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")

    def dtype_from(self, kinds: Mapping[str, str]) -> str:
        """The element type of a call: ``dtype`` if fixed, else that of the float inputs (name -> dtype name).

        With no float inputs it is float64.  Mixed or non-float types are refused rather than cast:
        a silent cast would hide a copy and a change of precision.
        """
        if self.dtype is not None:
            return self.dtype
        found = {k for n, k in kinds.items() if n not in self.index_inputs}
        if not found:
            return "float64"
        if len(found) > 1 or not found <= set(DTYPES):
            raise TccError(f"the float inputs must all be float64 or all float32 (got {', '.join(sorted(found))}); "
                           f"or give dtype= to {self.api}")
        return found.pop()
