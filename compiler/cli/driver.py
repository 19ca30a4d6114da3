"""The ``tcc`` command line.

    tcc grad FILE --of f --wrt a,d [-o OUT] [--passes SPEC] [dump flags]
    tcc jacobian FILE --of f --wrt x [-o OUT] [dump flags]     (also: hessian, jvp)
    tcc check FILE --of f --wrt a,d [--seed N] [--tol T] [--eps E] [--sizes n=4,m=3]
    tcc run FILE --inputs in.npz --output out.npz [--target cpu] [--dtype D] [--threads N] [--reference]
    tcc compile FILE --emit index|loops|llvm|asm|dot [-o OUT] [--passes SPEC] [--dtype D] [dump flags]
    tcc passes                                                 (every pass: level, options, summary)

-v (--verbose) or TCC_LOG=debug|info|warning|error: pass logs on stderr (docs/logging.md)
dump flags: --print-pipeline --dump-before P|all --dump-after P|all
            --dump-dir DIR --time-passes --verify-each

FILE may be ``-`` (stdin).  A user error prints ``FILE:LINE:COL: error:
message``, the source line and a caret to stderr and exits 1; a compiler bug
prints ``tcc: internal error: ...`` with the traceback and exits 2.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import stat
import sys
import tempfile
import traceback
from typing import IO, Any, Callable, Sequence

from tcc.backends import BUILTIN_TARGETS
from tcc.backends.target import DTYPES
from tcc.ir.diagnostics import TccError
from tcc.logconfig import ENV_VAR, cli_logging
from tcc.cli.npz_files import input_array, load_npz, write_npz

TARGETS = list(BUILTIN_TARGETS)  # the built-in table only: reading entry points would slow every start
EMITS = ["index", "loops", "llvm", "ptx", "asm", "dot"]
DTYPES = list(DTYPES)  # the element types of tcc.backends.target, as argparse choices


class _UsageError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting 2 (exit 2 means a compiler bug here)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(self, message)


def _positive_float(text: str) -> float:
    """A finite number above zero: a NaN step or tolerance makes every comparison false, so a
    check could neither pass nor fail for a reason."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: '{text}'") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got '{text}'")
    return value


def _seed(text: str) -> int:
    """NumPy's generators take seeds >= 0 only."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got '{text}'")
    return value


def _add_pipeline_flags(p: argparse.ArgumentParser, *, default_passes: str | None) -> None:
    help_default = f" (default: {default_passes})" if default_passes else " (default: the grad pipeline)"
    p.add_argument("--passes", metavar="SPEC", help="pass pipeline, e.g. 'infer-ranges,simplify'" + help_default)
    p.add_argument("--print-pipeline", action="store_true", help="print the resolved pipeline to stderr")
    p.add_argument("--dump-before", metavar="P|all", action="append", default=[],
                   help="print the IR before pass P (comma-separated names, or all) to stderr")
    p.add_argument("--dump-after", metavar="P|all", action="append", default=[],
                   help="print the IR after pass P (comma-separated names, or all) to stderr")
    p.add_argument("--dump-dir", metavar="DIR",
                   help="write numbered dumps (00-input.tcc, 01-<pass>.tcc, ...) to DIR instead of stderr")
    p.add_argument("--time-passes", action="store_true", help="print a per-pass timing table to stderr")
    p.add_argument("--verify-each", action="store_true", help="verify the IR after every pass")
    p.add_argument("--no-verify-plugins", dest="verify_plugins", action="store_false",
                   help="do not verify the results of plug-in passes (verified by default)")


def _add_gpu_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", default="", metavar="sm_XY",
                   help="GPU architecture for --target cuda (default: the GPU's, or sm_80 without one)")
    p.add_argument("--ptx", type=int, default=0, metavar="VERSION",
                   help="PTX ISA version times ten for --target cuda, e.g. 78 (default: the arch's minimum)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tcc", description="A staged tensor-algebra compiler with exact symbolic derivatives.")
    parser.add_argument("-v", "--verbose", action="store_true", help="pass logs on stderr, DEBUG (docs/logging.md)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    g = sub.add_parser("grad", help="print the derivative program")
    g.add_argument("file", metavar="FILE", help="source file, or - for stdin")
    g.add_argument("--of", help="the definition to differentiate")
    g.add_argument("--wrt", help="comma-separated inputs to differentiate with respect to")
    g.add_argument("--value", action="store_true", help="keep the differentiated definition as the first output")
    g.add_argument("-o", "--output", metavar="OUT", help="write the program to OUT instead of stdout")
    g.add_argument("--emit", choices=["index", "dot"], default="index", help="the program as text, or Graphviz DOT")
    _add_pipeline_flags(g, default_passes=None)

    for name, what in (
        ("jacobian", "print the program of the full Jacobian (f's indices, then x's)"),
        ("hessian", "print the program of the Hessian w.r.t. one input (f's indices, then x's twice)"),
        ("jvp", "print the forward-mode program: tangents dx of the inputs give the tangent df"),
    ):
        d = sub.add_parser(name, help=what)
        d.add_argument("file", metavar="FILE", help="source file, or - for stdin")
        d.add_argument("--of", help="the definition to differentiate (default: Lippmann's expression)")
        d.add_argument("--wrt", help="the input(s) to differentiate with respect to (default: Lippmann's argument)")
        d.add_argument("-o", "--output", metavar="OUT", help="write the program to OUT instead of stdout")
        d.add_argument("--emit", choices=["index", "dot"], default="index", help="the program as text, or Graphviz DOT")
        _add_pipeline_flags(d, default_passes=None)

    c = sub.add_parser("check", help="finite-difference check of derivatives")
    c.add_argument("file", metavar="FILE")
    c.add_argument("--of", required=True)
    c.add_argument("--wrt", required=True)
    c.add_argument("--seed", type=_seed, default=0, help="random seed, >= 0 (default 0)")
    c.add_argument("--tol", type=_positive_float, default=1e-6,
                   help="tolerance on the normwise relative error, > 0 (default 1e-6)")
    c.add_argument("--eps", type=_positive_float, default=1e-6, help="finite-difference step, > 0 (default 1e-6)")
    c.add_argument("--sizes", metavar="n=4,m=3", help="bind size names (default 5, 4, 6, 3, 7, ... in order)")
    c.add_argument("--target", choices=TARGETS + ["reference"], default="cpu",
                   help="evaluate with compiled code (cpu, the default; cuda on a GPU; cuda-sim: the GPU "
                        "kernels simulated on the CPU) or the reference interpreter")

    r = sub.add_parser("run", help="evaluate every definition")
    r.add_argument("file", metavar="FILE")
    r.add_argument("--inputs", metavar="IN.npz", help="input arrays (.npz); undeclared arrays are ignored")
    r.add_argument("--output", metavar="OUT.npz", required=True, help="where every definition is written")
    r.add_argument("--target", choices=TARGETS, default="cpu",
                   help="where the compiled code runs: cpu (default), cuda (an NVIDIA GPU, needs PyCUDA) or "
                        "cuda-sim (the GPU kernels simulated on the CPU)")
    _add_gpu_flags(r)
    r.add_argument("--dtype", choices=DTYPES, default="float64", help="element type (default float64)")
    r.add_argument("--threads", type=int, help="threads for parallel loops (default: all cores)")
    r.add_argument("--reference", action="store_true",
                   help="evaluate with the reference interpreter instead of compiled code")
    _add_pipeline_flags(r, default_passes="the compile pipeline")

    k = sub.add_parser("compile", help="run a pipeline and print the result")
    k.add_argument("file", metavar="FILE")
    k.add_argument("--emit", choices=EMITS, default="index",
                   help="index: L1 after the passes; loops: L2 loop nests; llvm: optimised LLVM IR; "
                        "ptx: PTX for NVIDIA GPUs (implies --target cuda); asm: host assembly, or PTX for "
                        "--target cuda; dot: Graphviz DOT of the L1 program, or of the kernels of an L2 one (default index)")
    k.add_argument("--target", choices=TARGETS, default=None,
                   help="cpu (default), cuda or cuda-sim; decides the default pipeline and the code generated")
    _add_gpu_flags(k)
    k.add_argument("--dtype", choices=DTYPES, default="float64", help="element type (default float64)")
    k.add_argument("-o", "--output", metavar="OUT", help="write the result to OUT instead of stdout")
    _add_pipeline_flags(k, default_passes="infer-ranges for index, the compile pipeline otherwise")

    ps = sub.add_parser("passes", help="list every available pass with its level, options and summary")
    ps.set_defaults(file=None)  # reads no source
    for p in sub.choices.values():  # -v after the command too; SUPPRESS: it never undoes a -v before it
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


# ---------------------------------------------------------------------------


def _names(text: str, flag: str) -> list[str]:
    names = [w.strip() for w in text.split(",")]
    if not names or any(not n for n in names):
        raise TccError(f"{flag} expects comma-separated names, got '{text}'")
    return names


def _parse_sizes(text: str | None) -> dict[str, int] | None:
    if text is None or not text.strip():
        return None
    sizes: dict[str, int] = {}
    for item in text.split(","):
        key, eq, value = item.partition("=")
        key = key.strip()
        try:
            if not eq or not key:
                raise ValueError
            number = int(value.strip())
        except ValueError:
            raise TccError(f"--sizes expects name=integer pairs like n=4,m=3, got '{text}'") from None
        if key in sizes:  # the last would silently win
            raise TccError(f"--sizes gives size '{key}' twice, in '{text}'")
        sizes[key] = number
    return sizes


def _selection(values: list[str]) -> Any:
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    return "all" if "all" in names else set(names)


def _instruments(args: argparse.Namespace) -> tuple[list[Any], Any]:
    from tcc.instruments import DumpIR, TimePasses, VerifyEach

    insts: list[Any] = []
    if args.verify_each:
        insts.append(VerifyEach())
    before, after = _selection(args.dump_before), _selection(args.dump_after)
    if before or after or args.dump_dir:
        insts.append(DumpIR(before=before, after=after, stream=sys.stderr, directory=args.dump_dir, render=_render(args)))
    timer = None
    if args.time_passes:
        timer = TimePasses()
        insts.insert(0, timer)
    return insts, timer


def _render(args: argparse.Namespace) -> Callable[[Any], str]:
    """How results and dumps are written: as text, or as Graphviz DOT under ``--emit dot``."""
    if getattr(args, "emit", None) != "dot":
        return str
    from tcc.ir.dot import program_dot

    return program_dot


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _replace_file(path: str, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` all at once: into a temporary file beside it, renamed over it when complete.

    A failure part-way (a full disk, ``ulimit -f``, an error while
    serialising) leaves the previous file as it was and no temporary file
    behind.  The new file keeps the old one's permissions, or gets the
    umask's for a new file (mkstemp's 0600 would surprise).  A symlink is
    followed, so the link stays; something that is not a regular file
    (``/dev/null``, a FIFO) is written in place: there is nothing to keep, and
    renaming over a device would replace the device.  That output gets the
    bytes written to memory first (a writer may seek, as zipfile does, and a
    pipe cannot), then streamed; it is opened by its own name, as
    ``/dev/stdout`` names a pipe that its resolved path does not.
    """
    try:
        old: os.stat_result | None = os.stat(path)  # follows a symlink
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        data = io.BytesIO()
        write(data)
        with open(path, "wb") as fh:
            fh.write(data.getbuffer())
        return
    target = os.path.realpath(path)
    directory, base = os.path.split(target)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{base}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(old.st_mode) if old is not None else 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_output(path: str, write: Callable[[IO[bytes]], None]) -> None:
    try:
        _replace_file(path, write)
    except OSError as exc:
        raise TccError(f"cannot write '{path}': {exc.strerror or exc}") from None


def _write_text(text: str, path: str | None) -> None:
    if path is None or path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    _write_output(path, lambda fh: fh.write(text.encode("utf-8")))


class _Session:
    """Remembers the source being compiled so errors can show its line."""

    source: Any = None
    text: str | None = None
    filename: str | None = None

    def read(self, path: str) -> None:
        """Read the source first, so a missing file is reported before anything else."""
        from tcc.api import read_source

        self.text, self.filename = read_source(path)

    def load_source(self, path: str) -> Any:
        """The source in either form (:func:`tcc.ir.parser.parse_source`): a program, or a
        :class:`~tcc.ir.lippmann.LippmannProblem` that also names what to differentiate."""
        from tcc.ir.lippmann import LippmannProblem
        from tcc.ir.parser import parse_source

        if self.text is None:
            self.read(path)
        assert self.text is not None and self.filename is not None
        source = parse_source(self.text, self.filename)
        program = source.program if isinstance(source, LippmannProblem) else source
        self.source = getattr(program, "source", None)
        return source

    def load(self, path: str) -> Any:
        """The program, in either form."""
        from tcc.ir.lippmann import LippmannProblem

        source = self.load_source(path)
        return source.program if isinstance(source, LippmannProblem) else source


def _run_passes(session: _Session, args: argparse.Namespace, program: Any, passes: list[Any]) -> Any:
    from tcc.pipeline import check_levels, format_pipeline, run_pipeline

    check_levels(passes)
    insts, timer = _instruments(args)
    if args.print_pipeline:
        print(format_pipeline(passes), file=sys.stderr)
    try:
        return run_pipeline(program, passes, instruments=insts, verify_plugins=args.verify_plugins)
    finally:
        if timer is not None:
            sys.stderr.write(timer.report())


def _target(session: _Session, args: argparse.Namespace) -> tuple[Any, str, list[str], bool]:
    """The program, what to differentiate, and whether the source is in Lippmann's form (which
    supplies --of/--wrt when left out)."""
    from tcc.ir.lippmann import LippmannProblem

    wrt = _names(args.wrt, "--wrt") if args.wrt is not None else []
    of = args.of or ""
    source = session.load_source(args.file)
    if isinstance(source, LippmannProblem):
        return (*source.target(of, wrt), True)
    return source, of, wrt, False


def cmd_grad(session: _Session, args: argparse.Namespace) -> int:
    """The derivative program; of Lippmann's form, the full derivative tensor (as in his appendix)."""
    from tcc.pipeline import derivative_pipeline

    program, of, wrt, lippmann = _target(session, args)
    if args.passes is None and (not of or not wrt):
        raise TccError("tcc grad needs --of and --wrt (or a --passes pipeline that names them)")
    passes = derivative_pipeline(of, wrt, seed="delta" if lippmann else "input", passes=args.passes, value=args.value)
    result = _run_passes(session, args, program, passes)
    _write_text(_render(args)(result), args.output)
    return 0


def cmd_derivative(session: _Session, args: argparse.Namespace) -> int:
    """``tcc jacobian|hessian|jvp``: the default pipeline, or ``--passes`` for each derivative taken."""
    from tcc.pipeline import derivative_pipeline

    program, of, wrt, _ = _target(session, args)
    if not of or not wrt:
        raise TccError(f"tcc {args.command} needs --of and --wrt")
    if args.command == "hessian" and len(wrt) != 1:
        raise TccError(f"a Hessian is taken with respect to one input, not {len(wrt)} ({', '.join(wrt)})")
    mode, seed = ("forward", "input") if args.command == "jvp" else ("reverse", "delta")

    def stage(p: Any, of: str) -> Any:
        return _run_passes(session, args, p, derivative_pipeline(of, wrt, mode, seed, args.passes, override=True))

    result = stage(program, of)
    if args.command == "hessian":
        result = stage(result, result.outputs[0])
    _write_text(_render(args)(result), args.output)
    return 0


def _emit_target(args: argparse.Namespace) -> str:
    """``--emit ptx`` means target cuda; ``--target`` otherwise (default cpu)."""
    if args.emit == "ptx":
        if args.target not in (None, "cuda"):
            raise TccError(f"--emit ptx generates code for target cuda, not '{args.target}'")
        return "cuda"
    return args.target or "cpu"


def _emit_pipeline(args: argparse.Namespace) -> list[Any]:
    """The passes that take the program to the level ``--emit`` asks for."""
    from tcc.build import compile_pipeline, default_pipeline
    from tcc.passes.pass_base import Level
    from tcc.pipeline import check_levels, parse_pipeline
    from tcc.targets import get_target

    if args.emit in ("index", "dot"):
        passes = parse_pipeline(args.passes if args.passes is not None else "infer-ranges")
        if check_levels(passes) not in ((Level.INDEX,) if args.emit == "index" else (Level.INDEX, Level.LOOPS)):
            raise TccError(f"--emit {args.emit} needs a pipeline that stays at the index level"
                           + (" or ends at the loop level" if args.emit == "dot" else ""))
        return passes
    target = _emit_target(args)
    if args.emit == "loops":
        passes = parse_pipeline(args.passes if args.passes is not None else default_pipeline(target))
        level = check_levels(passes)
        if level is Level.INDEX:
            passes += parse_pipeline("lower-loops")
        elif level is not Level.LOOPS:
            raise TccError("--emit loops needs a pipeline that ends at the loop level")
        return passes
    passes = compile_pipeline(args.passes, args.dtype, target, args.arch, args.ptx)
    if args.emit == "llvm" and passes[-1].name in get_target(target).emit_passes:
        passes = passes[:-1]  # cuda: the optimised NVPTX module, libdevice linked in
    return passes


def cmd_compile(session: _Session, args: argparse.Namespace) -> int:
    passes = _emit_pipeline(args)
    program = session.load(args.file)
    result = _run_passes(session, args, program, passes)
    if args.emit == "asm":  # host assembly, or the PTX for cuda
        from tcc.targets import get_target

        text = get_target(_emit_target(args)).assembly(result)
    else:
        text = _render(args)(result)
    _write_text(text if text.endswith("\n") else text + "\n", args.output)
    return 0


def cmd_check(session: _Session, args: argparse.Namespace) -> int:
    from tcc.reference.fdcheck import check_gradients

    wrt = _names(args.wrt, "--wrt")
    sizes = _parse_sizes(args.sizes)
    program = session.load(args.file)
    results = check_gradients(program, args.of, wrt, seed=args.seed, eps=args.eps, tol=args.tol, sizes=sizes,
                              target=args.target)
    for r in results:
        print(r)
    worst = max((r.max_rel_error for r in results), default=0.0)
    failed = [r.gradient for r in results if not r.ok]
    status = "ok" if not failed else "FAILED (" + ", ".join(failed) + ")"
    print(f"worst relative error {worst:.1e} (tol {args.tol:g}) {status}")
    return 1 if failed else 0


def cmd_passes(session: _Session, args: argparse.Namespace) -> int:
    """``tcc passes``: every pass a pipeline can name, read from the classes themselves.

    The level, options and summary come from the pass class (``level``,
    ``produces``, the dataclass fields, ``summary``), so the listing cannot
    drift from the code.  Passes come in :func:`~tcc.registry.available_passes`
    order (sorted by name).  A pass whose class cannot be loaded (an external
    package that fails to import) gets ``?`` and the error on its own line, the
    others are still listed, and the exit status is 1.
    """
    import dataclasses
    import typing

    from tcc.registry import available_passes, get_pass_class

    def allowed(tp: Any) -> str:
        """The option's values as a pipeline string writes them."""
        if isinstance(tp, str):  # an annotation that could not be resolved
            return tp
        if typing.get_origin(tp) is typing.Literal:
            return "|".join(str(a) for a in typing.get_args(tp))
        if tp is bool:
            return "true|false"
        if typing.get_origin(tp) in (tuple, list):
            return allowed(typing.get_args(tp)[0]) + ",..."
        return getattr(tp, "__name__", str(tp).replace("typing.", ""))

    def spelled(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (tuple, list)):
            return ",".join(str(v) for v in value)
        return str(value)

    names = available_passes()
    width = max((len(n) for n in names), default=0)
    failed = False
    for name in names:
        try:
            cls = get_pass_class(name)
        except Exception as exc:  # noqa: BLE001 - one broken plug-in must not hide the others
            failed = True
            why = str(exc) if isinstance(exc, TccError) else f"error: {type(exc).__name__}: {exc}"
            print(f"{name:<{width}}  {'?':<14}  {why}")
            continue
        level = f"{cls.level} -> {cls.produces}" if cls.produces else str(cls.level)
        print(f"{name:<{width}}  {level:<14}  {cls.summary or '(no summary)'}".rstrip())
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - a plug-in's unresolvable annotations: show them as written
            hints = {}
        options = []
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                default = spelled(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                default = spelled(f.default_factory())
            else:
                default = "(required)"
            options.append((f"{f.name.replace('_', '-')}={default}", allowed(hints.get(f.name, f.type))))
        column = max((len(o) for o, _ in options), default=0)
        for option, values in options:
            print(f"    {option:<{column}}  {values}")
    return 1 if failed else 0


def cmd_run(session: _Session, args: argparse.Namespace) -> int:
    import numpy as np

    from tcc.reference.interpreter import evaluate
    from tcc.passes.infer_ranges import InferRanges
    from tcc.pipeline import run_pipeline
    from tcc.runtime.compiled import check_threads

    program = session.load(args.file)
    arrays: dict[str, Any] = {}
    if args.inputs is not None:
        declared = {d.name for d in program.inputs}
        loaded = load_npz(args.inputs, declared)
        index = {d.name for d in program.inputs if d.is_index}  # integers as they are: validated by the call
        arrays = {k: v if k in index else input_array(k, v, args.inputs, args.dtype) for k, v in loaded.items()}
    missing = [d.name for d in program.caller_inputs() if d.name not in arrays]
    if missing:
        where = f"'{args.inputs}'" if args.inputs is not None else "the inputs (no --inputs given)"
        raise TccError(f"missing input{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)} in {where}")
    if args.threads is not None:
        try:
            check_threads(args.threads, "--threads")
        except ValueError as e:
            raise TccError(str(e)) from None
    if args.reference:
        program = run_pipeline(program, [InferRanges()])
        results = evaluate(program, arrays, np.dtype(args.dtype))
    else:
        from tcc.build import build, compile_pipeline

        passes = compile_pipeline(args.passes, args.dtype, args.target, args.arch, args.ptx)
        insts, timer = _instruments(args)
        if args.print_pipeline:
            from tcc.pipeline import format_pipeline

            print(format_pipeline(passes), file=sys.stderr)
        try:
            compiled = build(program, target=args.target, dtype=args.dtype, passes=passes,
                             threads=args.threads, instruments=insts, arch=args.arch, ptx=args.ptx,
                             verify_plugins=args.verify_plugins)
        finally:
            if timer is not None:
                sys.stderr.write(timer.report())
        results = compiled(**arrays)
    _write_output(args.output, lambda fh: write_npz(fh, results))
    return 0


COMMANDS = {
    "grad": cmd_grad, "jacobian": cmd_derivative, "hessian": cmd_derivative, "jvp": cmd_derivative,
    "check": cmd_check, "run": cmd_run, "compile": cmd_compile, "passes": cmd_passes,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    session = _Session()
    try:
        try:
            args = parser.parse_args(argv)
        except _UsageError as exc:
            sys.stderr.write(exc.parser.format_usage())
            print(f"{exc.parser.prog}: error: {exc.message}", file=sys.stderr)
            return 1
        except SystemExit as exc:  # --help
            return exc.code if isinstance(exc.code, int) else 0
        if args.file is not None:
            session.read(args.file)
        with cli_logging(args.verbose, os.environ.get(ENV_VAR)):
            return COMMANDS[args.command](session, args)
    except TccError as err:
        if err.source is None and err.loc is not None and session.source is not None:
            err.source = session.source
        print(err.render(), file=sys.stderr)
        return 1
    except MemoryError as exc:  # sizes too large for this machine: not a compiler bug
        print(f"error: out of memory{': ' + str(exc) if str(exc) else ''}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tcc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 1
    except Exception as exc:  # noqa: BLE001 - a compiler bug: show everything
        print(f"tcc: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        return 2
