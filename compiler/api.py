"""The public Python API of tcc (re-exported lazily as ``tcc.parse`` etc.).

    import tcc
    p = tcc.parse("examples/urban.tcc")
    dp = tcc.grad(p, of="f", wrt=["a", "d"])
    print(dp)                                  # a program in the tcc language
    values = tcc.run(dp, {"a": a, "b": b, "c": c, "d": d, "df": seed})   # interpreter
    f = tcc.compile(dp)                        # native code (llvmlite)
    values = f(a=a, b=b, c=c, d=d, df=seed)
    for r in tcc.check(p, "f", ["a", "d"]):
        print(r)
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Sequence

import numpy as np

from tcc.ir.diagnostics import TccError
from tcc.passes.pass_base import Pass, PassContext

__all__ = ["parse", "read_source", "grad", "transform", "compile", "run", "check"]


def read_source(path: str | os.PathLike) -> tuple[str, str]:
    """``(text, filename)`` of a source file; ``-`` reads stdin as ``<stdin>``."""
    path = os.fspath(path)
    if path == "-":
        text = sys.stdin.read()
        return (text[1:] if text.startswith("\ufeff") else text), "<stdin>"
    try:
        # utf-8-sig: a byte-order mark is not part of the program
        with open(path, encoding="utf-8-sig") as fh:
            return fh.read(), path
    except OSError as exc:
        raise TccError(f"cannot read '{path}': {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TccError(f"cannot read '{path}': not UTF-8 text ({exc.reason})") from None


def is_source_path(text: str) -> bool:
    """How every entry point tells a path from program text: one line naming a file, ending in
    ``.tcc``, or ``-`` (stdin)."""
    return "\n" not in text and (text.endswith(".tcc") or text == "-" or os.path.isfile(text))


def parse(text_or_path: str | os.PathLike, filename: str | None = None) -> Any:
    """Parse a program.

    A ``pathlib.Path`` (or ``-`` for stdin) is read as a file; so is a string
    without a newline that names an existing file or ends in ``.tcc``.  Any
    other string is program text, reported as ``filename`` (default
    ``<string>``).
    """
    from tcc.ir.parser import parse_program

    if isinstance(text_or_path, os.PathLike) or (
        isinstance(text_or_path, str) and filename is None and is_source_path(text_or_path)
    ):
        text, name = read_source(text_or_path)
        return parse_program(text, filename or name)
    if not isinstance(text_or_path, str):
        raise TypeError(f"parse expects program text or a path, got {type(text_or_path).__name__}")
    return parse_program(text_or_path, filename or "<string>")


def _check_program_arg(program_or_text: Any, caller: str) -> None:
    """Refuse what is neither source nor a program up front: passed on, ``None`` or bytes
    would surface as an AttributeError deep inside a pass."""
    from tcc.ir.program import Program

    if not isinstance(program_or_text, (str, os.PathLike, Program)):
        raise TypeError(
            f"{caller} expects program text, a path or a tcc Program, got {type(program_or_text).__name__}"
        )


def _program(program_or_text: Any, caller: str) -> Any:
    _check_program_arg(program_or_text, caller)
    if isinstance(program_or_text, (str, os.PathLike)):
        return parse(program_or_text)
    return program_or_text


def _names(wrt: str | Sequence[str]) -> list[str]:
    if isinstance(wrt, str):
        return [w.strip() for w in wrt.split(",") if w.strip()]
    return list(wrt)


def derivative_target(program_or_text: Any, of: str | None, wrt: str | Sequence[str] | None) -> tuple[Any, str, list[str]]:
    """``(program, of, wrt)`` of a derivative asked for by the API (``grad``, ``jacobian``, ``hessian``,
    ``jvp``); Lippmann's ``declare ... derivative wrt x`` form supplies missing ones."""
    from tcc.ir.lippmann import LippmannProblem
    from tcc.ir.parser import parse_source

    _check_program_arg(program_or_text, "a derivative")
    if isinstance(program_or_text, (str, os.PathLike)):
        if isinstance(program_or_text, os.PathLike) or is_source_path(program_or_text):
            text, name = read_source(program_or_text)
        else:
            text, name = program_or_text, "<string>"
        source = parse_source(text, name)
        if isinstance(source, LippmannProblem):
            return source.target(of or "", _names(wrt) if wrt else [])
        program = source
    else:
        program = program_or_text
    if not of or not wrt:
        raise TccError("a derivative needs the definition (of=...) and the inputs (wrt=...)")
    return program, of, _names(wrt)


def grad(
    program_or_text: Any,
    of: str | None = None,
    wrt: str | Sequence[str] | None = None,
    passes: str | Sequence[Pass] | None = None,
    instruments: Sequence[Any] = (),
    *,
    mode: str = "reverse",
    seed: str = "input",
    value: bool = False,
    verify_plugins: bool = True,
) -> Any:
    """The derivative program of ``of`` with respect to each of ``wrt``.

    Runs the default grad pipeline (:data:`tcc.pipeline.DEFAULT_GRAD_PIPELINE`)
    or ``passes`` (a spec string or Pass instances); passes with ``of`` /
    ``wrt`` options left empty (e.g. a bare ``autodiff``) get these.
    ``seed="delta"`` gives the full Jacobian instead of a vector-Jacobian
    product, ``mode="forward"`` the Jacobian-vector product (see
    :mod:`tcc.derivatives` for compiled Jacobians and Hessians).  Source in
    Lippmann's ``declare ... derivative wrt x`` form supplies ``of``/``wrt``.
    ``value=True`` keeps ``of`` as the program's first output: one program
    computes the value and the derivatives (``jax.value_and_grad``), sharing
    the intermediates that a separate forward program would compute again.
    ``verify_plugins=False`` skips verifying the results of plug-in passes
    in ``passes`` (:func:`tcc.pipeline.run_pipeline`; docs/writing-a-pass.md).
    """
    from tcc.pipeline import derivative_pipeline, run_pipeline

    _check_program_arg(program_or_text, "grad")
    program, of, wrt = derivative_target(program_or_text, of, wrt)
    return run_pipeline(program, derivative_pipeline(of, wrt, mode, seed, passes, value=value), instruments=instruments,
                        verify_plugins=verify_plugins)


def transform(
    program_or_text: Any,
    passes: str | Sequence[Pass] = "infer-ranges",
    instruments: Sequence[Any] = (),
    ctx: PassContext | None = None,
    *,
    verify_plugins: bool = True,
) -> Any:
    """Run a pipeline (default ``infer-ranges``) and return its result (any IR level); plug-in
    passes' results are verified unless ``verify_plugins=False`` (:func:`tcc.pipeline.run_pipeline`)."""
    from tcc.pipeline import run_pipeline

    return run_pipeline(_program(program_or_text, "transform"), passes, ctx=ctx, instruments=instruments,
                        verify_plugins=verify_plugins)


def compile(
    program_or_text: Any,
    target: str = "cpu",
    *,
    dtype: Any = "float64",
    passes: str | Sequence[Pass] | None = None,
    threads: int | None = None,
    instruments: Sequence[Any] = (),
    arch: str = "",
    ptx: int = 0,
    results: str | Sequence[str] | None = None,
    verify_plugins: bool = True,
) -> Any:
    """Compile a program to native code; returns a callable :class:`tcc.runtime.compiled.CompiledProgram`.

    ``f = tcc.compile(src); out = f(x=x, w=w)`` takes NumPy arrays by input
    name and returns a dict with every definition's array.  ``dtype`` is
    ``float64`` or ``float32``; ``threads`` (default: all cores) splits
    parallel loops; ``passes`` replaces the L1/L2 part of the pipeline
    (:data:`tcc.build.DEFAULT_LOOP_PIPELINE`, or ``DEFAULT_GPU_PIPELINE`` for
    the GPU), the lowering is appended.  ``target="cuda"`` runs on an NVIDIA
    GPU through PyCUDA (:mod:`tcc.backends.cuda`; device arrays are accepted
    too), with ``arch`` (``sm_XY``, default the GPU's) and ``ptx`` (PTX ISA
    version times ten, default the arch's minimum); ``target="cuda-sim"``
    runs the same grid kernels on the CPU, for testing without a GPU.
    ``results`` (names, or one comma-separated string) limits what a call
    returns to those definitions; the others are intermediates that the
    compiler may recompute where they are read or drop
    (``rematerialize``), and their memory is kept for the next call
    (docs/runtime.md#results).  The results of plug-in passes in the
    pipeline are verified, their accesses proved in bounds, unless
    ``verify_plugins=False`` (docs/writing-a-pass.md).
    """
    from tcc.build import build

    return build(
        _program(program_or_text, "compile"), target=target, dtype=dtype, passes=passes, threads=threads,
        instruments=instruments, arch=arch, ptx=ptx, results=results, verify_plugins=verify_plugins,
    )


def run(program: Any, inputs: Mapping[str, Any], dtype: Any = np.float64) -> dict[str, np.ndarray]:
    """Every definition of ``program`` (``infer-ranges`` first), by the reference interpreter."""
    from tcc.reference.interpreter import evaluate
    from tcc.passes.infer_ranges import InferRanges
    from tcc.pipeline import run_pipeline

    program = run_pipeline(_program(program, "run"), [InferRanges()])
    return evaluate(program, inputs, dtype)


def check(
    program_or_text: Any,
    of: str,
    wrt: str | Sequence[str],
    *,
    seed: int = 0,
    eps: float = 1e-6,
    tol: float = 1e-6,
    sizes: Mapping[str, int] | None = None,
    low: float = 0.25,
    high: float = 0.75,
    target: str = "cpu",
) -> list:
    """Finite-difference check of ``d of / d wrt`` (see :func:`tcc.reference.fdcheck.check_gradients`)."""
    from tcc.reference.fdcheck import check_gradients

    return check_gradients(
        _program(program_or_text, "check"), of, _names(wrt), seed=seed, eps=eps, tol=tol, sizes=sizes, low=low,
        high=high, target=target,
    )
