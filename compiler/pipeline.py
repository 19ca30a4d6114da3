"""Pass pipelines: parse a spec string, check levels, run with instruments.

A pipeline spec is a comma-separated list of passes with MLIR-style options::

    infer-ranges,autodiff{of=f wrt=a,d},sum-liberation

Options sit inside braces, separated by whitespace, as ``key=value``; dashes
in keys map to underscores in the dataclass field names; a value is converted
by the field's annotated type (``str``, ``int``, ``float``, ``bool`` as
``true``/``false``, ``tuple[T, ...]`` as comma-separated, ``Literal[...]`` as
one of its choices).  Commas inside braces belong to option values.
``Pass.spec()`` prints a pass back in this form, so
``",".join(p.spec() for p in parse_pipeline(s))`` re-parses to equal passes.

Instruments see every pass through one hook list: for each pass,
``before_pass(pass, index, program)``, then the pass runs, then
``after_pass(pass, index, program)`` with its result.
"""
from __future__ import annotations

import dataclasses
import logging
import re
import types
import typing
from typing import Any, Iterable, Sequence

from tcc.ir.diagnostics import TccError
from tcc.passes.pass_base import Level, Pass, PassContext
from tcc.registry import get_pass_class

#: at DEBUG, each pass as it starts: the passes' own lines (docs/logging.md) follow it
logger = logging.getLogger(__name__)

DEFAULT_GRAD_PIPELINE = (
    "infer-ranges,contract-order,autodiff{{of={of} wrt={wrt}}},sum-liberation,index-solve,range-bound,simplify,factor-linear,inverse-index,cse"
)
#: Forward mode reads its inputs at the same indices as the function: a gather
#: by construction, with no constrained sums to solve.
DEFAULT_FORWARD_PIPELINE = "infer-ranges,autodiff{{of={of} wrt={wrt} mode=forward}},simplify,cse"


# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------


def _malformed(spec: str, detail: str) -> TccError:
    return TccError(f"malformed pass pipeline '{spec}': {detail}")


def _split_elements(spec: str) -> list[str]:
    """Split at top-level commas, checking braces."""
    elements: list[str] = []
    depth = 0
    start = 0
    for pos, ch in enumerate(spec):
        if ch == "{":
            if depth:
                raise _malformed(spec, f"nested '{{' at position {pos}")
            depth = 1
        elif ch == "}":
            if not depth:
                raise _malformed(spec, f"unmatched '}}' at position {pos}")
            depth = 0
        elif ch == "," and not depth:
            elements.append(spec[start:pos])
            start = pos + 1
    if depth:
        raise _malformed(spec, "unclosed '{'")
    elements.append(spec[start:])
    return elements


_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def _option_fields(cls: type[Pass]) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def _option_names(cls: type[Pass]) -> str:
    names = [n.replace("_", "-") for n in _option_fields(cls)]
    return ", ".join(names) if names else "none"


def _convert(raw: str, tp: Any, what: str) -> Any:
    """Convert one option value by its annotated type; ``what`` names it for errors."""

    def bad(expected: str) -> TccError:
        return TccError(f"invalid value '{raw}' for {what}: expected {expected}")

    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if raw in ("", "none", "None") and len(non_none) != len(args):
            return None
        if len(non_none) == 1:
            return _convert(raw, non_none[0], what)
        for a in non_none:
            try:
                return _convert(raw, a, what)
            except TccError:
                continue
        raise bad(" or ".join(getattr(a, "__name__", str(a)) for a in non_none))
    if origin is typing.Literal:
        for choice in args:
            text = ("true" if choice else "false") if isinstance(choice, bool) else str(choice)
            if text == raw:
                return choice
        raise bad("one of " + ", ".join(str(c) for c in args))
    if origin in (tuple, list):
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            item = args[0]
        elif origin is list and len(args) == 1:
            item = args[0]
        else:
            raise TccError(f"{what} has an unsupported type {tp!r}")
        if raw == "":
            return origin()
        parts = raw.split(",")
        if any(p == "" for p in parts):
            raise bad("a comma-separated list without empty elements")
        return origin(_convert(p, item, what) for p in parts)
    if tp is bool:
        if raw.lower() == "true":
            return True
        if raw.lower() == "false":
            return False
        raise bad("true or false")
    if tp is int:
        try:
            return int(raw, 10)
        except ValueError:
            raise bad("an integer") from None
    if tp is float:
        try:
            return float(raw)
        except ValueError:
            raise bad("a number") from None
    if tp is str:
        return raw
    if tp is Any:
        return raw
    raise TccError(f"{what} has an unsupported type {tp!r}")


def _parse_options(cls: type[Pass], name: str, text: str) -> dict[str, Any]:
    fields = _option_fields(cls)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # pragma: no cover - unresolved annotations in a plug-in
        hints = {}
    # allow "wrt=a, d": whitespace around commas belongs to the value
    text = re.sub(r"\s*,\s*", ",", text.strip())
    values: dict[str, Any] = {}
    for token in text.split():
        key, eq, raw = token.partition("=")
        if not eq or not key:
            raise TccError(f"malformed options for pass '{name}': expected key=value, got '{token}'")
        field_name = key.replace("-", "_")
        if field_name not in fields:
            raise TccError(f"unknown option '{key}' for pass '{name}' (valid options: {_option_names(cls)})")
        if field_name in values:
            raise TccError(f"option '{key}' given twice for pass '{name}'")
        tp = hints.get(field_name, fields[field_name].type)
        if isinstance(tp, str):  # unresolvable string annotation: fall back by the default's type
            default = fields[field_name].default
            tp = type(default) if default is not dataclasses.MISSING else str
        values[field_name] = _convert(raw, tp, f"option '{key}' of pass '{name}'")
    return values


def parse_pass(element: str, spec: str | None = None) -> Pass:
    """One pipeline element, e.g. ``autodiff{of=f wrt=a,d}``."""
    spec = element if spec is None else spec
    text = element.strip()
    brace = text.find("{")
    if brace >= 0:
        if not text.endswith("}"):
            raise _malformed(spec, f"unexpected text after '}}' in '{text}'")
        name, opts = text[:brace].strip(), text[brace + 1 : -1]
    else:
        name, opts = text, ""
    if not name:
        raise _malformed(spec, f"missing pass name before '{{' in '{text}'")
    if not _NAME_RE.match(name):
        raise _malformed(spec, f"invalid pass name '{name}'")
    cls = get_pass_class(name)
    values = _parse_options(cls, name, opts)
    try:
        return cls(**values)
    except TccError:
        raise
    except (TypeError, ValueError) as exc:
        raise TccError(f"invalid options for pass '{name}': {exc}") from None


def parse_pipeline(spec: str) -> list[Pass]:
    """Parse a pipeline spec into pass instances (an empty spec is an empty pipeline)."""
    if not spec.strip():
        return []
    elements = _split_elements(spec)
    passes = []
    for i, element in enumerate(elements):
        if not element.strip():
            raise _malformed(spec, f"empty pass at position {i + 1}")
        passes.append(parse_pass(element, spec))
    return passes


def format_pipeline(passes: Iterable[Pass]) -> str:
    """The spec string of a pipeline (inverse of :func:`parse_pipeline`)."""
    return ",".join(p.spec() for p in passes)


def resolve_pipeline(passes: str | Sequence[Pass]) -> list[Pass]:
    """A spec string or a sequence of passes, as a list of passes."""
    if isinstance(passes, str):
        return parse_pipeline(passes)
    out = list(passes)
    for p in out:
        if not isinstance(p, Pass):
            raise TypeError(f"not a pass: {p!r}")
    return out


def derivative_pipeline(
    of: str,
    wrt: Sequence[str] | str,
    mode: str = "reverse",
    seed: str = "input",
    passes: str | Sequence[Pass] | None = None,
    *,
    override: bool = False,
    value: bool = False,
) -> list[Pass]:
    """The pipeline of one derivative: the one builder behind ``grad``, ``jacobian``, ``hessian``
    (both stages), ``jvp`` and ``check``, from the API and the command line alike.

    Without ``passes`` it is the default pipeline: ``mode``/``seed`` are the
    options of ``autodiff`` (``seed="delta"`` gives the full Jacobian and adds
    ``inline-guards``, ``mode="forward"`` the Jacobian-vector product).

    With ``passes`` (a spec string or Pass instances) it is those passes.  By
    default their own options win, and ``of``/``wrt`` only fill the options
    left empty (a bare ``autodiff``): the user who wrote the pipeline chose
    what it computes.  With ``override`` the caller has chosen (a Jacobian, a
    Hessian's stage, a JVP), so every ``autodiff`` is told ``of``, ``wrt``,
    ``mode`` and ``seed``.  ``value`` tells every ``autodiff`` to keep ``of``
    as the first output (value and gradient in one program).
    """
    if isinstance(wrt, str):
        wrt = [w.strip() for w in wrt.split(",") if w.strip()]
    if passes is not None:
        pipeline = resolve_pipeline(passes)
        if override:
            return [
                dataclasses.replace(p, of=of, wrt=tuple(wrt), mode=mode, seed=seed, value=value or p.value)
                if p.name == "autodiff" else p
                for p in pipeline
            ]
        filled = _fill_derivative_options(pipeline, of, wrt)
        return [dataclasses.replace(p, value=True) if value and p.name == "autodiff" else p for p in filled]
    spec = DEFAULT_FORWARD_PIPELINE if mode == "forward" else DEFAULT_GRAD_PIPELINE
    if seed == "delta" and mode == "reverse":
        spec = spec.replace("simplify,", "simplify,inline-guards,")
    default = parse_pipeline(spec.format(of=of, wrt=",".join(wrt)))
    return [dataclasses.replace(p, mode=mode, seed=seed, value=value) if p.name == "autodiff" else p for p in default]


def grad_pipeline(of: str, wrt: Sequence[str] | str, mode: str = "reverse", seed: str = "input") -> list[Pass]:
    """The default derivative pipeline for ``d of / d wrt`` (:func:`derivative_pipeline` without
    ``passes``; kept as the public name, ``tcc.grad_pipeline``)."""
    return derivative_pipeline(of, wrt, mode, seed)


def _fill_derivative_options(passes: Sequence[Pass], of: str, wrt: Sequence[str]) -> list[Pass]:
    """Give passes with empty ``of`` / ``wrt`` options (a bare ``autodiff``) these values."""
    out = []
    for p in passes:
        names = {f.name for f in dataclasses.fields(p) if f.init}
        changes: dict[str, Any] = {}
        if "of" in names and not getattr(p, "of") and of:
            changes["of"] = of
        if "wrt" in names and not getattr(p, "wrt") and wrt:
            changes["wrt"] = tuple(wrt)
        out.append(dataclasses.replace(p, **changes) if changes else p)
    return out


def check_lowering(passes: Sequence[Pass], *, dtype: str, target: str, arch: str = "", ptx: int = 0) -> None:
    """Refuse a ``lower-llvm`` in ``passes`` whose options contradict the compile call's.

    The runtime allocates buffers of the call's dtype and loads the code for
    the call's target; a kernel lowered for another element type reads and
    writes past them (wrong values, heap corruption).  ``dtype`` and ``target``
    always bind; ``arch``/``ptx`` only when the call names one, since
    ``lower-llvm{target=cuda arch=sm_90}`` is a documented way to choose them.
    Checked before any pass runs.
    """
    wanted: dict[str, Any] = {"dtype": dtype, "target": target}
    if arch:
        wanted["arch"] = arch
    if ptx:
        wanted["ptx"] = ptx
    for p in passes:
        if p.name != "lower-llvm":
            continue
        for option, value in wanted.items():
            have = getattr(p, option, value)
            if have != value:
                raise TccError(
                    f"the pipeline's '{p.name}' has {option}={have}, but the program is compiled for "
                    f"{option} {value}: give both the same {option}, or leave '{p.name}' out of the "
                    f"pipeline (it is appended with the compile options)"
                )


# ---------------------------------------------------------------------------
# Level checking and running
# ---------------------------------------------------------------------------


def check_levels(passes: Sequence[Pass], start: Level = Level.INDEX) -> Level:
    """Check that each pass consumes the IR level reached so far; returns the final level."""
    level = start
    previous: Pass | None = None
    for p in passes:
        if p.level != level:
            where = f"after '{previous.spec()}'" if previous is not None else "at its start"
            raise TccError(
                f"pass '{p.name}' consumes {p.level} IR but the pipeline is at {level} IR {where}"
            )
        level = p.output_level
        previous = p
    return level


def plugin_verification(passes: Sequence[Pass]) -> tuple[Any, ...]:
    """The instrument that verifies the results of ``passes``' plug-ins, as a tuple (empty when every
    pass is tcc's own: nothing to verify, no hook to call)."""
    from tcc.instruments import VerifyPlugins
    from tcc.registry import is_builtin_pass

    if all(is_builtin_pass(p) for p in passes):
        return ()
    return (VerifyPlugins(),)


def run_pipeline(
    program: Any,
    passes: str | Sequence[Pass],
    ctx: PassContext | None = None,
    instruments: Sequence[Any] = (),
    *,
    start: Level = Level.INDEX,
    verify_plugins: bool = True,
) -> Any:
    """Run ``passes`` on ``program``; levels are checked before anything runs.

    Each instrument gets ``before_pass(pass, index, program)`` before and
    ``after_pass(pass, index, result)`` after each pass.  A TccError raised
    by a pass without a source gets the input program's source attached.

    With ``verify_plugins`` (the default) the L1 or L2 result of every pass
    that is not tcc's own is verified, its accesses proved in bounds
    (:class:`tcc.instruments.VerifyPlugins`, after the given instruments, so
    a dump still shows the program refused): a plug-in's out-of-bounds read
    would otherwise be compiled into a segfault or garbage.  Every entry
    point that runs passes (``tcc.compile``, ``tcc.transform``, ``tcc.grad``,
    the command line) comes here, so they agree.  ``verify_plugins=False``
    saves the proof's time for a plug-in trusted already.  It is
    independent of a :class:`~tcc.instruments.VerifyEach` among
    ``instruments`` (``--verify-each``), whose L2 check is structural only.
    """
    passes = resolve_pipeline(passes)
    check_levels(passes, start)
    ctx = PassContext() if ctx is None else ctx
    source = getattr(program, "source", None)
    instruments = tuple(instruments)
    if verify_plugins:
        instruments += plugin_verification(passes)
    try:
        for index, p in enumerate(passes):
            for inst in instruments:
                hook = getattr(inst, "before_pass", None)
                if hook is not None:
                    hook(p, index, program)
            if logger.isEnabledFor(logging.DEBUG):  # spec() prints the options: only when someone listens
                logger.debug("pass %d of %d: %s", index + 1, len(passes), p.spec())
            program = p.run(program, ctx)
            for inst in instruments:
                hook = getattr(inst, "after_pass", None)
                if hook is not None:
                    hook(p, index, program)
    except TccError as err:
        if err.source is None and source is not None and err.loc is not None:
            err.source = source
        raise
    return program
