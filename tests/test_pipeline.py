"""The pass framework: pipeline specs, levels, instruments, registry."""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import io
import os
from dataclasses import dataclass
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tcc import registry
from tcc.ir.diagnostics import TccError
from tcc.instruments import DumpIR, TimePasses, VerifyEach
from tcc.passes.pass_base import Level, Pass, PassContext
from tcc.passes import BUILTIN_PASSES
from tcc.pipeline import (
    DEFAULT_GRAD_PIPELINE,
    check_levels,
    format_pipeline,
    grad_pipeline,
    parse_pipeline,
    run_pipeline,
)

# ---------------------------------------------------------------------------
# Dummy passes (registered for the tests of this module only)
# ---------------------------------------------------------------------------

EVENTS: list[str] = []


@dataclass(frozen=True)
class Ident(Pass):
    name = "t-id"
    level = Level.INDEX

    def run(self, program, ctx):
        EVENTS.append(f"run {self.spec()}")
        return program


@dataclass(frozen=True)
class Opts(Pass):
    name = "t-opts"
    level = Level.INDEX
    n: int = 1
    x: float = 0.5
    flag: bool = False
    label: str = ""
    names: tuple[str, ...] = ()
    max_depth: int = 3
    mode: Literal["fast", "slow"] = "fast"

    def run(self, program, ctx):
        EVENTS.append(f"run {self.spec()}")
        return program


@dataclass(frozen=True)
class LowerLoops(Pass):
    name = "t-lower"
    level = Level.INDEX
    produces = Level.LOOPS

    def run(self, program, ctx):
        EVENTS.append("run t-lower")
        return program


@dataclass(frozen=True)
class LoopsPass(Pass):
    name = "t-loops"
    level = Level.LOOPS

    def run(self, program, ctx):
        EVENTS.append("run t-loops")
        return program


@dataclass(frozen=True)
class Break(Pass):
    """Deliberately broken: defines the first definition twice."""

    name = "t-break"
    level = Level.INDEX

    def run(self, program, ctx):
        return program.with_definitions(program.definitions + program.definitions[:1])


@dataclass(frozen=True)
class Scale(Pass):
    """Multiplies every definition body by 2 (so dumps differ between steps)."""

    name = "t-scale"
    level = Level.INDEX

    def run(self, program, ctx):
        from tcc.ir.expr import Binary, Const

        return program.with_definitions(d.with_body(Binary("*", Const(2), d.body)) for d in program.definitions)


DUMMIES = [Ident, Opts, LowerLoops, LoopsPass, Break, Scale]


@pytest.fixture(autouse=True)
def _dummies():
    for cls in DUMMIES:
        registry.register_pass(cls)
    EVENTS.clear()
    yield
    for cls in DUMMIES:
        registry.unregister_pass(cls.name)


SRC = """input a[3, 5], b[4, 5]
output f[3, 4]
f[i, j] = exp(-sum[k]((a[i, k] + b[j, k])**2))
"""


def _program():
    from tcc.ir.parser import parse_program

    return parse_program(SRC, "t.tcc")


def _known() -> str:
    return ", ".join(registry.available_passes())


# ---------------------------------------------------------------------------
# Spec parsing
# ---------------------------------------------------------------------------


def test_parse_plain_and_empty():
    assert parse_pipeline("t-id") == [Ident()]
    assert parse_pipeline(" t-id , t-opts ") == [Ident(), Opts()]
    assert parse_pipeline("") == []
    assert parse_pipeline("t-opts{}") == [Opts()]


def test_parse_options_by_type():
    (p,) = parse_pipeline("t-opts{n=3 x=2.5 flag=true label=hi names=a,b max-depth=7 mode=slow}")
    assert p == Opts(n=3, x=2.5, flag=True, label="hi", names=("a", "b"), max_depth=7, mode="slow")
    (q,) = parse_pipeline("t-opts{flag=false names= n=-2 x=1e-3}")
    assert q == Opts(flag=False, names=(), n=-2, x=1e-3)


def test_commas_inside_braces_belong_to_values():
    ps = parse_pipeline("t-id,t-opts{names=a,b,c},t-id")
    assert ps == [Ident(), Opts(names=("a", "b", "c")), Ident()]
    assert parse_pipeline("t-opts{names=a, b  n=2}") == [Opts(names=("a", "b"), n=2)]


def test_spec_round_trip():
    specs = [
        "t-id",
        "t-opts{n=3 x=2.5 flag=true label=hi names=a,b max-depth=7 mode=slow}",
        "t-id,t-opts{names=a,b},t-lower,t-loops",
        "t-opts{flag=false names= label=x}",
    ]
    for s in specs:
        ps = parse_pipeline(s)
        again = format_pipeline(ps)
        assert parse_pipeline(again) == ps
        assert ",".join(p.spec() for p in ps) == again
    assert Opts(max_depth=9).spec() == "t-opts{max-depth=9}"
    assert Opts().spec() == "t-opts"


_ident = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(-10**6, 10**6),
    x=st.floats(allow_nan=False, allow_infinity=False),
    flag=st.booleans(),
    label=_ident,
    names=st.lists(_ident, max_size=4).map(tuple),
    mode=st.sampled_from(["fast", "slow"]),
)
def test_spec_round_trip_property(n, x, flag, label, names, mode):
    registry.register_pass(Opts)
    p = Opts(n=n, x=x, flag=flag, label=label, names=names, mode=mode)
    assert parse_pipeline(p.spec()) == [p]
    assert parse_pipeline(f"t-id,{p.spec()},t-id") == [Ident(), p, Ident()]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope", "unknown pass 'nope' (known passes: {known})"),
        ("t-id,nope{x=1}", "unknown pass 'nope' (known passes: {known})"),
        (
            "t-opts{bogus=1}",
            "unknown option 'bogus' for pass 't-opts' (valid options: n, x, flag, label, names, max-depth, mode)",
        ),
        ("t-id{n=1}", "unknown option 'n' for pass 't-id' (valid options: none)"),
        ("t-opts{n=abc}", "invalid value 'abc' for option 'n' of pass 't-opts': expected an integer"),
        ("t-opts{n=1.5}", "invalid value '1.5' for option 'n' of pass 't-opts': expected an integer"),
        ("t-opts{x=fast}", "invalid value 'fast' for option 'x' of pass 't-opts': expected a number"),
        ("t-opts{flag=yes}", "invalid value 'yes' for option 'flag' of pass 't-opts': expected true or false"),
        (
            "t-opts{names=a,,b}",
            "invalid value 'a,,b' for option 'names' of pass 't-opts': "
            "expected a comma-separated list without empty elements",
        ),
        ("t-opts{mode=medium}", "invalid value 'medium' for option 'mode' of pass 't-opts': expected one of fast, slow"),
        ("t-opts{n=1 n=2}", "option 'n' given twice for pass 't-opts'"),
        ("t-opts{n}", "malformed options for pass 't-opts': expected key=value, got 'n'"),
        ("t-opts{=3}", "malformed options for pass 't-opts': expected key=value, got '=3'"),
        ("t-opts{n=1", "malformed pass pipeline 't-opts{n=1': unclosed '{'"),
        ("t-id}", "malformed pass pipeline 't-id}': unmatched '}' at position 4"),
        ("t-opts{n={1}}", "malformed pass pipeline 't-opts{n={1}}': nested '{' at position 9"),
        ("t-id,,t-id", "malformed pass pipeline 't-id,,t-id': empty pass at position 2"),
        ("t-id,", "malformed pass pipeline 't-id,': empty pass at position 2"),
        (",t-id", "malformed pass pipeline ',t-id': empty pass at position 1"),
        ("t-opts{n=1}x", "malformed pass pipeline 't-opts{n=1}x': unexpected text after '}' in 't-opts{n=1}x'"),
        ("{n=1}", "malformed pass pipeline '{n=1}': missing pass name before '{' in '{n=1}'"),
        ("t id", "malformed pass pipeline 't id': invalid pass name 't id'"),
    ],
)
def test_spec_errors(spec, message):
    with pytest.raises(TccError) as info:
        parse_pipeline(spec)
    assert info.value.message == message.replace("{known}", _known())


def test_grad_pipeline_format_string():
    assert DEFAULT_GRAD_PIPELINE.format(of="f", wrt="a,d") == (
        "infer-ranges,contract-order,autodiff{of=f wrt=a,d},sum-liberation,index-solve,range-bound,simplify,factor-linear,inverse-index,cse"
    )


def test_grad_pipeline_passes():
    ps = grad_pipeline("f", ["a", "d"])
    assert [p.name for p in ps] == [
        "infer-ranges", "contract-order", "autodiff", "sum-liberation", "index-solve", "range-bound", "simplify", "factor-linear", "inverse-index", "cse",
    ]
    assert ps[2].of == "f" and ps[2].wrt == ("a", "d")
    assert parse_pipeline(format_pipeline(ps)) == ps


# ---------------------------------------------------------------------------
# Levels
# ---------------------------------------------------------------------------


def test_levels_ok():
    assert check_levels(parse_pipeline("t-id,t-lower,t-loops,t-loops")) is Level.LOOPS
    assert check_levels([]) is Level.INDEX
    assert check_levels([LoopsPass()], start=Level.LOOPS) is Level.LOOPS


def test_levels_mismatch_after_pass():
    with pytest.raises(TccError) as info:
        check_levels(parse_pipeline("t-opts{n=2},t-loops"))
    assert info.value.message == "pass 't-loops' consumes loops IR but the pipeline is at index IR after 't-opts{n=2}'"
    with pytest.raises(TccError) as info:
        check_levels(parse_pipeline("t-id,t-lower,t-id"))
    assert info.value.message == "pass 't-id' consumes index IR but the pipeline is at loops IR after 't-lower'"


def test_levels_mismatch_at_start():
    with pytest.raises(TccError) as info:
        check_levels([LoopsPass()])
    assert info.value.message == "pass 't-loops' consumes loops IR but the pipeline is at index IR at its start"


def test_levels_checked_before_anything_runs():
    with pytest.raises(TccError):
        run_pipeline(object(), "t-id,t-id,t-loops")
    assert EVENTS == []


# ---------------------------------------------------------------------------
# Running and instruments
# ---------------------------------------------------------------------------


class Recorder:
    def __init__(self, tag):
        self.tag = tag

    def before_pass(self, pass_, index, program):
        EVENTS.append(f"{self.tag} before {index} {pass_.spec()}")

    def after_pass(self, pass_, index, program):
        EVENTS.append(f"{self.tag} after {index} {pass_.spec()}")


def test_instrument_order():
    prog = object()
    out = run_pipeline(prog, "t-id,t-opts{n=2}", instruments=[Recorder("A"), Recorder("B")])
    assert out is prog
    assert EVENTS == [
        "A before 0 t-id", "B before 0 t-id", "run t-id", "A after 0 t-id", "B after 0 t-id",
        "A before 1 t-opts{n=2}", "B before 1 t-opts{n=2}", "run t-opts{n=2}",
        "A after 1 t-opts{n=2}", "B after 1 t-opts{n=2}",
    ]


def test_run_pipeline_passes_context():
    seen = []

    @dataclass(frozen=True)
    class Ctx(Pass):
        name = "t-ctx"

        def run(self, program, ctx):
            seen.append(ctx)
            return program

    ctx = PassContext(options={"k": 1})
    run_pipeline(object(), [Ctx(), Ctx()], ctx=ctx)
    assert seen == [ctx, ctx]


def test_dump_stream_before_and_after():
    prog = _program()
    buf = io.StringIO()
    dump = DumpIR(before={"t-scale"}, after={"t-opts"}, stream=buf)
    run_pipeline(prog, "t-opts{n=2},t-scale,t-id", instruments=[dump])
    text = buf.getvalue()
    assert text.count("# -----// IR") == 2
    assert text.startswith("# -----// IR after t-opts{n=2} //----- #\n" + str(prog))
    assert "# -----// IR before t-scale //----- #\n" in text


def test_dump_all():
    buf = io.StringIO()
    run_pipeline(_program(), "t-id,t-scale", instruments=[DumpIR(before="all", after="all", stream=buf)])
    headers = [line for line in buf.getvalue().splitlines() if line.startswith("# -----//")]
    assert headers == [
        "# -----// IR before t-id //----- #",
        "# -----// IR after t-id //----- #",
        "# -----// IR before t-scale //----- #",
        "# -----// IR after t-scale //----- #",
    ]


def test_dump_unknown_pass_name():
    with pytest.raises(TccError) as info:
        DumpIR(after={"zzz"})
    assert info.value.message == f"unknown pass 'zzz' in --dump-after (known passes: {_known()})"
    with pytest.raises(TccError) as info:
        DumpIR(before="t-id,zzz")
    assert info.value.message.startswith("unknown pass 'zzz' in --dump-before")


def test_dump_dir_numbered_files_parse_back(tmp_path):
    from tcc.ir.parser import parse_program

    prog = _program()
    dump = DumpIR(directory=tmp_path / "d")
    out = run_pipeline(prog, "infer-ranges,t-scale,t-opts{n=2}", instruments=[dump])
    files = sorted(os.listdir(tmp_path / "d"))
    assert files == ["00-input.tcc", "01-infer-ranges.tcc", "02-t-scale.tcc", "03-t-opts.tcc"]
    texts = [(tmp_path / "d" / f).read_text() for f in files]
    assert texts[0].startswith("# -----// IR input //----- #\n")
    assert texts[2].startswith("# -----// IR after t-scale //----- #\n")
    assert texts[3].startswith("# -----// IR after t-opts{n=2} //----- #\n")
    for f, text in zip(files, texts):
        again = parse_program(text, f)
        assert str(again) == text.split("\n", 1)[1]
    assert texts[3].split("\n", 1)[1] == str(out)
    assert texts[2] != texts[1]


def test_dump_dir_selection(tmp_path):
    run_pipeline(_program(), "t-id,t-scale,t-id", instruments=[DumpIR(after={"t-scale"}, directory=tmp_path)])
    assert sorted(os.listdir(tmp_path)) == ["00-input.tcc", "02-t-scale.tcc"]
    d2 = tmp_path / "b"
    run_pipeline(_program(), "t-id,t-scale,t-id", instruments=[DumpIR(before={"t-scale"}, directory=d2)])
    assert sorted(os.listdir(d2)) == ["00-input.tcc", "01-t-id.tcc"]
    assert (d2 / "01-t-id.tcc").read_text().startswith("# -----// IR before t-scale //----- #\n")


def test_time_passes_report():
    ticks = iter([0.0, 0.001, 0.001, 0.004])
    timer = TimePasses(clock=lambda: next(ticks))
    run_pipeline(object(), "t-id,t-opts{n=2}", instruments=[timer])
    assert [n for n, _ in timer.timings] == ["t-id", "t-opts{n=2}"]
    assert timer.total == pytest.approx(0.004)
    lines = timer.report().splitlines()
    assert lines[0].split() == ["pass", "ms", "%"]
    assert lines[1].split() == ["t-id", "1.000", "25.0%"]
    assert lines[2].split() == ["t-opts{n=2}", "3.000", "75.0%"]
    assert lines[3].split() == ["total", "4.000", "100.0%"]


def test_time_passes_real_clock():
    timer = TimePasses()
    run_pipeline(object(), "t-id", instruments=[timer])
    assert "t-id" in timer.report() and "total" in timer.report()


def test_verify_each_catches_broken_pass():
    prog = _program()
    run_pipeline(prog, "t-id,t-scale", instruments=[VerifyEach()])
    with pytest.raises(TccError) as info:
        run_pipeline(prog, "t-id,t-break,t-id", instruments=[VerifyEach()])
    assert info.value.message.startswith("IR verification failed after pass 't-break': ")
    assert "'f' is already defined" in info.value.message


def test_verify_each_custom_verifier_and_levels():
    calls = []
    run_pipeline(object(), "t-id,t-lower,t-loops", instruments=[VerifyEach(verify=calls.append)])
    assert len(calls) == 1  # only the index-level result is verified


def test_pass_errors_get_the_program_source():
    from tcc.ir.program import Loc

    @dataclass(frozen=True)
    class Fail(Pass):
        name = "t-fail"

        def run(self, program, ctx):
            raise TccError("this pass fails here", Loc(3, 1))

    with pytest.raises(TccError) as info:
        run_pipeline(_program(), [Fail()])
    assert info.value.render().splitlines() == [
        "t.tcc:3:1: error: this pass fails here",
        "f[i, j] = exp(-sum[k]((a[i, k] + b[j, k])**2))",
        "^",
    ]


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------


def test_builtin_table_lists_exactly_the_pass_modules():
    """One row per module of passes/ (one pass per module), and no row without a module."""
    import pathlib

    import tcc.backends
    import tcc.passes

    # pass_base holds the Pass class itself, not a pass; a pass may be a
    # module or a package (a directory with __init__.py) of its phases
    root = pathlib.Path(tcc.passes.__file__).parent
    modules = {p.stem for p in root.glob("*.py") if p.stem not in ("__init__", "pass_base")}
    modules |= {p.parent.name for p in root.glob("*/__init__.py")}
    # the L3 passes drive a backend, so they live in backends/ (still one module named as the pass)
    backends = pathlib.Path(tcc.backends.__file__).parent
    modules |= {n.replace("-", "_") for n in L3_PASSES if (backends / (n.replace("-", "_") + ".py")).is_file()}
    assert sorted(n.replace("-", "_") for n in BUILTIN_PASSES) == sorted(modules)
    for core in ["infer-ranges", "autodiff", "sum-liberation", "index-solve", "range-bound", "simplify", "cse"]:
        assert core in BUILTIN_PASSES
    for name, target in BUILTIN_PASSES.items():
        module, _, cls = target.partition(":")
        assert module == _pass_package(name) + "." + name.replace("-", "_")


#: the passes that lower to LLVM and beyond: modules of tcc.backends, not tcc.passes
L3_PASSES = ("lower-llvm", "llvm-opt", "emit-ptx")


def _pass_package(name: str) -> str:
    return "tcc.backends" if name in L3_PASSES else "tcc.passes"


@pytest.mark.parametrize("name", sorted(BUILTIN_PASSES))
def test_builtin_table_agrees_with_pass_classes(name):
    cls = registry.get_pass_class(name)
    assert issubclass(cls, Pass)
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert cls.name == name
    module = importlib.import_module(cls.__module__)
    assert module.__name__ == _pass_package(name) + "." + name.replace("-", "_")
    assert f"{cls.__module__}:{cls.__qualname__}" == BUILTIN_PASSES[name]
    assert isinstance(cls.level, Level)
    assert cls.produces is None or list(Level).index(cls.produces) > list(Level).index(cls.level)
    assert parse_pipeline(cls().spec()) == [cls()]


def test_available_passes_sorted_and_complete():
    names = registry.available_passes()
    assert names == sorted(names)
    assert set(BUILTIN_PASSES) <= set(names)
    assert "t-opts" in names


def test_register_pass_conflicts():
    @dataclass(frozen=True)
    class Other(Pass):
        name = "t-id"

    with pytest.raises(TccError, match="already registered"):
        registry.register_pass(Other)

    @dataclass(frozen=True)
    class Shadow(Pass):
        name = "simplify"

    with pytest.raises(TccError, match="already a built-in pass"):
        registry.register_pass(Shadow)
    registry.register_pass(Other, replace=True)
    assert registry.get_pass_class("t-id") is Other
    with pytest.raises(TypeError):
        registry.register_pass(object)  # type: ignore[arg-type]


# entry points -----------------------------------------------------------


@dataclass(frozen=True)
class External(Pass):
    name = "t-ext"
    level = Level.INDEX
    k: int = 0

    def run(self, program, ctx):
        return program


class FakeEP:
    def __init__(self, name, value, obj):
        self.name, self.value, self.group, self._obj = name, value, "tcc.passes", obj

    def load(self):
        return self._obj


def _patch_eps(monkeypatch, eps):
    def entry_points(**kw):
        assert kw.get("group") == "tcc.passes"
        return list(eps)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_entry_point_pass(monkeypatch):
    _patch_eps(monkeypatch, [FakeEP("t-ext", "pkg.mod:External", External)])
    assert registry.get_pass_class("t-ext") is External
    assert "t-ext" in registry.available_passes()
    assert parse_pipeline("t-id,t-ext{k=4}") == [Ident(), External(k=4)]


def test_entry_point_gone_after_unpatch(monkeypatch):
    with monkeypatch.context() as m:
        _patch_eps(m, [FakeEP("t-ext", "pkg.mod:External", External)])
        assert registry.get_pass_class("t-ext") is External
    _patch_eps(monkeypatch, [])
    with pytest.raises(TccError, match="unknown pass 't-ext'"):
        registry.get_pass_class("t-ext")


def test_entry_point_name_must_match_class(monkeypatch):
    _patch_eps(monkeypatch, [FakeEP("t-other", "pkg.mod:External", External)])
    with pytest.raises(TccError) as info:
        registry.get_pass_class("t-other")
    assert info.value.message == (
        "entry point 't-other = pkg.mod:External' is named 't-other' but its class External has name 't-ext'"
    )


def test_entry_point_must_be_a_pass(monkeypatch):
    _patch_eps(monkeypatch, [FakeEP("t-ext", "pkg.mod:thing", object())])
    with pytest.raises(TccError, match="is not a tcc Pass subclass"):
        registry.get_pass_class("t-ext")


def test_entry_point_conflicting_with_builtin(monkeypatch):
    _patch_eps(monkeypatch, [FakeEP("simplify", "pkg.mod:Simplify", External)])
    with pytest.raises(TccError) as info:
        registry.get_pass_class("t-id")
    assert info.value.message == (
        "external pass 'simplify' (pkg.mod:Simplify, entry-point group 'tcc.passes') "
        "conflicts with the built-in pass of that name"
    )
    with pytest.raises(TccError, match="conflicts with the built-in pass"):
        registry.available_passes()


def test_entry_point_conflicting_with_registered(monkeypatch):
    _patch_eps(monkeypatch, [FakeEP("t-id", "pkg.mod:X", External)])
    with pytest.raises(TccError, match="conflicts with the registered pass"):
        parse_pipeline("t-opts")


def test_entry_points_offering_one_name_twice(monkeypatch):
    _patch_eps(monkeypatch, [FakeEP("t-ext", "a:External", External), FakeEP("t-ext", "b:External", External)])
    with pytest.raises(TccError, match="provided twice"):
        registry.get_pass_class("t-ext")
    # the same entry point seen twice (e.g. two metadata copies) is fine
    _patch_eps(monkeypatch, [FakeEP("t-ext", "a:External", External), FakeEP("t-ext", "a:External", External)])
    assert registry.get_pass_class("t-ext") is External


def test_import_tcc_is_lazy():
    import subprocess
    import sys

    code = (
        "import sys, tcc; "
        "bad = [m for m in ('numpy', 'tcc.api', 'tcc.pipeline', 'tcc.ir.parser') if m in sys.modules]; "
        "print(bad); "
        "assert tcc.parse is tcc.api.parse and callable(tcc.grad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_runtime_and_call_error_load_no_backend():
    """The runtime calls a target's executable and knows no backend: importing it (or ``tcc.CallError``,
    which users catch) must not load llvmlite or any code generator."""
    import subprocess
    import sys

    code = (
        "import sys, tcc; tcc.CallError; import tcc.runtime.compiled; "
        "print(sorted(m for m in sys.modules if m == 'llvmlite' or m.startswith(('tcc.backends.llvm', "
        "'tcc.backends.cpu', 'tcc.backends.cuda', 'tcc.backends.ptx'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
