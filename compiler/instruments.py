"""Pipeline instruments: one hook list serves dumps, timing and verification.

An instrument has ``before_pass(pass, index, program)`` and
``after_pass(pass, index, program)``; :func:`tcc.pipeline.run_pipeline` calls
them around every pass, in the order the instruments are given.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Collection, TextIO

from tcc.ir.diagnostics import TccError
from tcc.passes.pass_base import Level, Pass

ALL = "all"


class BaseInstrument:
    """No-op hooks; subclass and override what you need."""

    def before_pass(self, pass_: Pass, index: int, program: Any) -> None:
        pass

    def after_pass(self, pass_: Pass, index: int, program: Any) -> None:
        pass


def header(when: str, pass_: Pass) -> str:
    """``# -----// IR after autodiff{of=f wrt=a} //----- #`` (a comment in the language)."""
    return f"# -----// IR {when} {pass_.spec()} //----- #"


def _selection(sel: Any, flag: str) -> frozenset[str] | str:
    """Normalise a selection (None, 'all', a name, or names) and check the names exist."""
    if sel is None:
        return frozenset()
    if isinstance(sel, str):
        if sel == ALL:
            return ALL
        sel = [s for s in sel.split(",")]
    names = frozenset(s.strip() for s in sel if s.strip())
    if ALL in names:
        return ALL
    if names:
        from tcc.registry import available_passes

        known = available_passes()
        for name in sorted(names):
            if name not in known:
                raise TccError(f"unknown pass '{name}' in {flag} (known passes: {', '.join(known)})")
    return names


def _selected(sel: frozenset[str] | str, pass_: Pass) -> bool:
    return sel == ALL or pass_.name in sel


def _is_loop_program(program: Any) -> bool:
    from tcc.ir.loops import LoopProgram

    return isinstance(program, LoopProgram)


def _is_llvm(program: Any) -> bool:
    """An L3 program (``tcc.backends.llvm.LLVMModule``) or a bare llvmlite module.

    Looked up in ``sys.modules`` so that dumping L1 and L2 never imports llvmlite:
    a program cannot be an instance of a class whose module was never loaded.
    """
    for module, cls in (("tcc.backends.llvm", "LLVMModule"), ("llvmlite.ir", "Module")):
        mod = sys.modules.get(module)
        if mod is not None and isinstance(program, getattr(mod, cls, ())):
            return True
    return False


def _is_ptx(program: Any) -> bool:
    mod = sys.modules.get("tcc.backends.ptx")
    return mod is not None and isinstance(program, mod.PTXModule)


def dump_suffix(program: Any) -> str:
    """The file suffix of a dump: ``.tcc`` (L1), ``.loops`` (L2), ``.ll`` (L3) or ``.ptx``."""
    if _is_loop_program(program):
        return ".loops"
    if _is_llvm(program):
        return ".ll"
    if _is_ptx(program):
        return ".ptx"
    return ".tcc"


def _titled(title: str, program: Any) -> str:
    """A dump header as a comment of the program's language (``;`` in LLVM IR, ``//`` in PTX, else ``#``)."""
    for check, mark in ((_is_llvm, ";"), (_is_ptx, "//")):
        if check(program):
            if title.startswith("# ") and title.endswith(" #"):
                return f"{mark} {title[2:-2]} {mark}"
            return f"{mark} {title}"
    return title


class DumpIR(BaseInstrument):
    """Print the IR before/after selected passes, or write it to numbered files.

    ``before`` / ``after``: ``"all"`` or a collection of pass names (matched on
    ``Pass.name``, so ``autodiff`` selects ``autodiff{of=f wrt=a}``).  Unknown
    names raise TccError.

    Without ``directory``, each dump is a header line and the program text on
    ``stream`` (default stderr).  With ``directory``, the program states are
    written as numbered files: ``00-input.tcc`` (always), and
    ``NN-<pass name>.tcc`` for the IR after the NN-th pass (1-based) when that
    pass is selected by ``after``; selecting pass NN by ``before`` writes the
    state it receives, i.e. file NN-1.  With neither selection given, every pass
    is selected (``--dump-dir`` alone).  The suffix follows the IR level: ``.tcc``
    for L1, ``.loops`` for L2 (:func:`tcc.ir.loops_parser.parse_loop_program`
    reads it back), ``.ll`` for an LLVM module and ``.ptx`` for PTX.  Each file
    starts with a header line that is a comment of its language (``#``; ``;``
    in LLVM IR; ``//`` in PTX), so
    the files parse back and any step can be replayed.  ``render`` other than
    ``str`` (``tcc.ir.dot.program_dot`` under ``--emit dot``) writes each
    state its way instead, in ``.dot`` files.
    """

    def __init__(
        self,
        before: Collection[str] | str | None = None,
        after: Collection[str] | str | None = None,
        stream: TextIO | None = None,
        directory: str | os.PathLike | None = None,
        render: Callable[[Any], str] = str,
    ) -> None:
        self.render = render
        self.before = _selection(before, "--dump-before")
        self.after = _selection(after, "--dump-after")
        self.stream = stream
        self.directory = None if directory is None else os.fspath(directory)
        if self.directory is not None and not self.before and not self.after:
            self.after = ALL
        self.written: list[str] = []
        self._states: set[int] = set()
        self._names: dict[int, str] = {0: "input"}
        if self.directory is not None:
            try:
                os.makedirs(self.directory, exist_ok=True)
            except OSError as exc:
                raise TccError(f"cannot create dump directory '{self.directory}': {exc.strerror or exc}") from None

    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def _write_state(self, state: int, title: str, program: Any) -> None:
        if state in self._states:
            return
        self._states.add(state)
        suffix = dump_suffix(program) if self.render is str else ".dot"
        path = os.path.join(self.directory, f"{state:02d}-{self._names[state]}{suffix}")
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(_titled(title, program) + "\n" + self.render(program))
        except OSError as exc:
            raise TccError(f"cannot write '{path}': {exc.strerror or exc}") from None
        self.written.append(path)

    def before_pass(self, pass_: Pass, index: int, program: Any) -> None:
        if self.directory is not None:
            if index == 0:
                self._write_state(0, "# -----// IR input //----- #", program)
            if _selected(self.before, pass_):
                self._write_state(index, header("before", pass_), program)
            return
        if _selected(self.before, pass_):
            out = self._out()
            out.write(_titled(header("before", pass_), program) + "\n" + self.render(program) + "\n")
            out.flush()

    def after_pass(self, pass_: Pass, index: int, program: Any) -> None:
        self._names[index + 1] = pass_.name
        if not _selected(self.after, pass_):
            return
        if self.directory is not None:
            self._write_state(index + 1, header("after", pass_), program)
            return
        out = self._out()
        out.write(_titled(header("after", pass_), program) + "\n" + self.render(program) + "\n")
        out.flush()


class TimePasses(BaseInstrument):
    """Wall time per pass; :meth:`report` renders a table (pass, ms, percent, total)."""

    def __init__(self, clock=time.perf_counter) -> None:
        self.clock = clock
        self.timings: list[tuple[str, float]] = []
        self._start: float | None = None

    def before_pass(self, pass_: Pass, index: int, program: Any) -> None:
        self._start = self.clock()

    def after_pass(self, pass_: Pass, index: int, program: Any) -> None:
        start = self._start if self._start is not None else self.clock()
        self.timings.append((pass_.spec(), self.clock() - start))
        self._start = None

    @property
    def total(self) -> float:
        return sum(t for _, t in self.timings)

    def report(self) -> str:
        total = self.total
        width = max([len("total"), len("pass")] + [len(n) for n, _ in self.timings])
        lines = [f"{'pass':<{width}}  {'ms':>10}  {'%':>6}"]
        for name, t in self.timings:
            pct = 100.0 * t / total if total > 0 else 0.0
            lines.append(f"{name:<{width}}  {t * 1e3:>10.3f}  {pct:>5.1f}%")
        lines.append(f"{'total':<{width}}  {total * 1e3:>10.3f}  {100.0 if self.timings else 0.0:>5.1f}%")
        return "\n".join(lines) + "\n"


def verify_loops_with_bounds(program: Any) -> None:
    """:func:`tcc.ir.loops_verifier.verify_loops` with its bounds proof: what a pass's L2 result
    must pass (compiled code does not check an index)."""
    from tcc.ir.loops_verifier import verify_loops

    verify_loops(program, bounds=True)


class VerifyEach(BaseInstrument):
    """Run the IR verifier of the produced level after each pass.

    Dispatch is on the program's type: an L2 :class:`~tcc.ir.loops.LoopProgram`
    goes to :func:`tcc.ir.loops_verifier.verify_loops` (or ``verify_loops``),
    the result of a pass producing index IR to :func:`tcc.ir.verifier.verify`
    with its bounds proof (or ``verify``), and anything else (an LLVM module)
    to its own ``verify()`` method when it has one; otherwise it is left alone.
    Plug-in passes' results are proved in bounds at L2 too, by
    :class:`VerifyPlugins`, which :func:`tcc.pipeline.run_pipeline` adds
    beside this one unless told not to.

    A failure becomes TccError "IR verification failed after pass 'X': <message>".
    """

    def __init__(self, verify=None, verify_loops=None) -> None:
        self._verify = verify
        self._verify_loops = verify_loops

    def _verifier(self):
        if self._verify is None:
            from tcc.ir.verifier import verify

            self._verify = verify
        return self._verify

    def _loops_verifier(self):
        if self._verify_loops is None:
            from tcc.ir.loops_verifier import verify_loops

            self._verify_loops = verify_loops
        return self._verify_loops

    def after_pass(self, pass_: Pass, index: int, program: Any) -> None:
        if _is_loop_program(program):
            check = self._loops_verifier()
        elif pass_.output_level is Level.INDEX:
            check = self._verifier()
        elif callable(getattr(program, "verify", None)):
            check = _own_verify
        else:
            return
        _checked(check, program, f"IR verification failed after pass '{pass_.spec()}'")


def _checked(check: Any, program: Any, prefix: str) -> None:
    """Run a verifier; its error is re-raised as ``prefix: message``, keeping its location."""
    try:
        check(program)
    except TccError as exc:
        raise TccError(f"{prefix}: {exc.message}", exc.loc, exc.source) from exc


class VerifyPlugins(BaseInstrument):
    """Verify the result of every pass that is not tcc's own (:func:`tcc.registry.is_builtin_pass`).

    :func:`tcc.pipeline.run_pipeline` adds it unless told not to
    (``verify_plugins=False``, ``--no-verify-plugins``).  tcc's passes are
    tested to keep programs valid; a plug-in's are not, and compiled code does
    not check an index, so an out-of-bounds read it builds would run as a
    segfault or as garbage.  An L1 :class:`~tcc.ir.program.Program` goes to
    :func:`tcc.ir.verifier.verify` with its bounds proof, an L2
    :class:`~tcc.ir.loops.LoopProgram` to :func:`verify_loops_with_bounds`.
    Anything else is left alone: an LLVM module or PTX has no bounds to
    prove (``--verify-each`` runs its own ``verify()``), and a value that is
    no tcc program (a test's stand-in) is nothing tcc could compile.

    A failure becomes TccError "pass 'X' (module:Class) produced an invalid
    program: <message>", naming where the plug-in's class lives.
    """

    def after_pass(self, pass_: Pass, index: int, program: Any) -> None:
        from tcc.ir.program import Program
        from tcc.registry import is_builtin_pass, pass_origin

        if is_builtin_pass(pass_):
            return
        if _is_loop_program(program):
            check = verify_loops_with_bounds
        elif isinstance(program, Program):
            from tcc.ir.verifier import verify

            check = verify
        else:
            return
        _checked(check, program, f"pass '{pass_.spec()}' ({pass_origin(pass_)}) produced an invalid program")


def _own_verify(program: Any) -> None:
    """``program.verify()``, whatever it raises (llvmlite: RuntimeError) reported as a TccError."""
    try:
        program.verify()
    except TccError:
        raise
    except Exception as exc:  # noqa: BLE001 - a verifier's report, not a crash of ours
        raise TccError(str(exc).strip() or type(exc).__name__) from exc
