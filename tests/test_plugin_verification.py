"""Plug-in passes' results are verified by default: an out-of-bounds access a plug-in builds is a
clear ``error:``, not a segfault or garbage; ``verify_plugins=False`` / ``--no-verify-plugins``
turn it off; tcc's own passes are not verified by default.

The plug-in is a real package (written to a temporary directory): in-process tests register its
classes, the command-line tests in a subprocess find it through its entry points, as a user's
installed plug-in is found.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tcc
from tcc.build import clear_cache
from tcc.diagnostics import TccError
from tcc.cli.driver import main
from tcc.instruments import VerifyEach, VerifyPlugins
from tcc.passes.simplify import Simplify
from tcc.pipeline import parse_pipeline, plugin_verification
from tcc.registry import is_builtin_pass, pass_origin, register_pass, unregister_pass

PACKAGE = "tccshift_plugin"

PLUGIN = '''
"""Passes that shift the first index of every read of an input by ``by``: ``x[i]`` -> ``x[i + by]``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tcc.ir.expr import Access, transform
from tcc.ir.loops import Accumulate, For, If, Let, Local, Store
from tcc.passes.pass_base import Level, Pass


def shift(e, inputs, by):
    def fn(n):
        if isinstance(n, Access) and n.tensor in inputs and n.indices:
            return Access(n.tensor, (n.indices[0] + by,) + n.indices[1:])
        return n
    return transform(e, fn)


@dataclass(frozen=True)
class Shift(Pass):
    name = "tv-shift"
    level = Level.INDEX
    by: int = 100000000

    def run(self, program, ctx):
        inputs = {d.name for d in program.inputs}
        return program.with_definitions(d.with_body(shift(d.body, inputs, self.by)) for d in program.definitions)


def shift_stmts(body, inputs, by):
    out = []
    for s in body:
        if isinstance(s, For):
            s = dataclasses.replace(s, body=shift_stmts(s.body, inputs, by))
        elif isinstance(s, If):
            s = dataclasses.replace(s, then=shift_stmts(s.then, inputs, by), orelse=shift_stmts(s.orelse, inputs, by))
        elif isinstance(s, Let):
            s = dataclasses.replace(s, value=shift(s.value, inputs, by))
        elif isinstance(s, Local):
            s = dataclasses.replace(s, init=shift(s.init, inputs, by))
        elif isinstance(s, (Store, Accumulate)):
            s = dataclasses.replace(s, value=shift(s.value, inputs, by))
        out.append(s)
    return tuple(out)


@dataclass(frozen=True)
class LoopShift(Pass):
    name = "tv-loop-shift"
    level = Level.LOOPS
    by: int = 100000000

    def run(self, program, ctx):
        inputs = {b.name for b in program.by_role("input")}
        return program.with_kernels(
            tuple(dataclasses.replace(k, body=shift_stmts(k.body, inputs, self.by)) for k in program.kernels)
        )
'''

SRC = "input x[5]\noutput y[5]\ny[i] = x[i] * 2\n"
SIZED = "input x[n]\noutput y[n]\ny[i] = x[i] * 2\n"

L1 = "infer-ranges,tv-shift{{by={by}}}"
L2 = "infer-ranges,lower-loops,tv-loop-shift{{by={by}}}"


def _message(level: str, by: int) -> str:
    """The error for ``x[i + by]`` in SRC (x has 5 elements, i runs over 0..4)."""
    name, cls, kernel = ("tv-shift", "Shift", "") if level == "L1" else ("tv-loop-shift", "LoopShift", "in kernel 'y': ")
    spec = name if by == 100000000 else f"{name}{{by={by}}}"  # spec(): the options not at their defaults
    return (
        f"pass '{spec}' ({PACKAGE}.passes:{cls}) produced an invalid program: {kernel}"
        f"access x[i + {by}] is out of bounds: i + {by} ranges over {by}..{by + 4}, but 'x' has extent 5"
    )


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    """The plug-in package, with the metadata that makes its passes entry points of ``tcc.passes``."""
    root = tmp_path_factory.mktemp("plugin")
    pkg = root / PACKAGE
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "passes.py").write_text(PLUGIN)
    info = root / f"{PACKAGE}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[tcc.passes]\ntv-shift = {PACKAGE}.passes:Shift\ntv-loop-shift = {PACKAGE}.passes:LoopShift\n"
    )
    return root


@pytest.fixture(scope="module")
def plugin(plugin_dir):
    sys.path.insert(0, str(plugin_dir))
    try:
        module = importlib.import_module(f"{PACKAGE}.passes")
    finally:
        sys.path.remove(str(plugin_dir))
    return module


@pytest.fixture(autouse=True)
def _registered(plugin):
    for cls in (plugin.Shift, plugin.LoopShift):
        register_pass(cls)
    yield
    for cls in (plugin.Shift, plugin.LoopShift):
        unregister_pass(cls.name)


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "prog.tcc"
    path.write_text(SRC)
    return str(path)


# ---------------------------------------------------------------------------
# The public API
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("level, spec", [("L1", L1), ("L2", L2)], ids=["L1", "L2"])
@pytest.mark.parametrize("by", [100000000, 3])
def test_compile_refuses_a_plugin_shift_out_of_bounds(level, spec, by):
    with pytest.raises(TccError) as info:
        tcc.compile(SRC, passes=spec.format(by=by))
    assert info.value.message == _message(level, by)


@pytest.mark.parametrize("level, spec", [("L1", L1), ("L2", L2)], ids=["L1", "L2"])
def test_transform_refuses_it_and_the_opt_out_returns_it(level, spec):
    with pytest.raises(TccError) as info:
        tcc.transform(SRC, spec.format(by=3))
    assert info.value.message == _message(level, 3)
    out = tcc.transform(SRC, spec.format(by=3), verify_plugins=False)
    assert "x[i + 3]" in str(out)


def test_symbolic_extent_is_refused_too():
    with pytest.raises(TccError) as info:
        tcc.compile(SIZED, passes=L2.format(by=3))
    assert info.value.message == (
        "pass 'tv-loop-shift{by=3}' (tccshift_plugin.passes:LoopShift) produced an invalid program: in kernel 'y': "
        "access x[i + 3] may be out of bounds: i + 3 ranges over 3..n + 2, but 'x' has extent n"
    )


def test_grad_with_a_plugin_in_its_passes():
    passes = "infer-ranges,tv-shift{by=3},autodiff,sum-liberation,index-solve,range-bound,simplify,cse"
    with pytest.raises(TccError) as info:
        tcc.grad(SRC, "y", "x", passes=passes)
    assert info.value.message == _message("L1", 3)
    assert tcc.grad(SRC, "y", "x", passes=passes, verify_plugins=False).outputs


def test_opt_out_compiles_and_is_cached_apart():
    """A compile without the proof must not serve a later compile that asks for it."""
    clear_cache()
    spec = L2.format(by=3)
    assert tcc.compile(SRC, passes=spec, verify_plugins=False) is not None  # never called: it reads past x
    with pytest.raises(TccError) as info:
        tcc.compile(SRC, passes=spec)
    assert info.value.message == _message("L2", 3)


@pytest.mark.parametrize("spec", [L1.format(by=0), L2.format(by=0)])
def test_a_correct_plugin_pass_passes_verification(spec):
    x = np.arange(5.0)
    np.testing.assert_array_equal(tcc.compile(SRC, passes=spec)(x=x)["y"], 2 * x)


def test_a_plugin_target_pipeline_is_verified():
    from tcc.backends.builtin_targets import CpuTarget
    from tcc.targets import register_target, unregister_target

    class Shifting(CpuTarget):
        name = "tv-shifting"
        lowering_target = "cpu"
        default_pipeline = L2.format(by=3)

    register_target(Shifting)
    try:
        with pytest.raises(TccError) as info:
            tcc.compile(SRC, target="tv-shifting")
        assert info.value.message == _message("L2", 3)
    finally:
        unregister_target("tv-shifting")


def test_verify_each_still_verifies_every_pass():
    with pytest.raises(TccError) as info:
        tcc.transform(SRC, L1.format(by=3), instruments=[VerifyEach()], verify_plugins=False)
    assert info.value.message.startswith("IR verification failed after pass 'tv-shift{by=3}': access x[i + 3]")


# ---------------------------------------------------------------------------
# What is a plug-in
# ---------------------------------------------------------------------------


def test_builtin_passes_are_not_verified_by_default(monkeypatch):
    def refuse(self, pass_, index, program):  # noqa: ANN001
        raise AssertionError(f"verified {pass_.spec()}")

    monkeypatch.setattr(VerifyPlugins, "after_pass", refuse)
    assert plugin_verification(parse_pipeline("infer-ranges,lower-loops,fuse-rows")) == ()
    x = np.arange(5.0)
    clear_cache()
    np.testing.assert_array_equal(tcc.compile(SRC)(x=x)["y"], 2 * x)
    assert tcc.grad(SRC, "y", "x").outputs


def test_a_subclass_of_a_builtin_pass_is_a_plugin(plugin):
    @dataclasses.dataclass(frozen=True)
    class MySimplify(Simplify):
        pass

    assert is_builtin_pass(Simplify()) and is_builtin_pass(Simplify)
    assert not is_builtin_pass(MySimplify()) and not is_builtin_pass(plugin.Shift)
    assert pass_origin(plugin.Shift()) == "tccshift_plugin.passes:Shift"
    assert plugin_verification([Simplify(), MySimplify()]) != ()


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("level, spec", [("L1", L1), ("L2", L2)], ids=["L1", "L2"])
@pytest.mark.parametrize("command, by", [("compile", 100000000), ("compile", 3), ("run", 3)])
def test_cli_refuses_a_plugin_shift(command, level, spec, by, src, tmp_path, capsys):
    """In-process: ``tcc run`` of the +100000000 shift, where it not refused, would kill the test
    process; it runs in a subprocess (test_installed_plugin_is_refused_and_the_opt_out_compiles)."""
    np.savez(tmp_path / "in.npz", x=np.arange(5.0))
    args = ["--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz")] if command == "run" \
        else ["--emit", "llvm"]
    assert main([command, src, "--passes", spec.format(by=by), *args]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[0].endswith(f"error: {_message(level, by)}")
    assert not (tmp_path / "out.npz").exists()


def test_cli_grad_refuses_a_plugin_shift(src, capsys):
    assert main(["grad", src, "--of", "y", "--wrt", "x", "--passes", "infer-ranges,tv-shift{by=3},autodiff"]) == 1
    assert capsys.readouterr().err.splitlines()[0].endswith(f"error: {_message('L1', 3)}")
    assert main(["grad", src, "--of", "y", "--wrt", "x", "--passes", "infer-ranges,tv-shift{by=3},autodiff",
                 "--no-verify-plugins"]) == 0


def _tcc(plugin_dir, *args: str) -> subprocess.CompletedProcess:
    """``tcc ARGS`` in a fresh process that finds the plug-in through its entry points."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plugin_dir), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "tcc", *args], capture_output=True, text=True, env=env, timeout=120)


def test_installed_plugin_is_refused_and_the_opt_out_compiles(plugin_dir, src, tmp_path):
    np.savez(tmp_path / "in.npz", x=np.arange(5.0))
    spec = L2.format(by=100000000)
    proc = _tcc(plugin_dir, "run", src, "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "o.npz"),
                "--passes", spec)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0] == f"{src}: error: {_message('L2', 100000000)}"
    # turned off, the same pipeline compiles (it is not run: its read is 800 MB past x)
    proc = _tcc(plugin_dir, "compile", src, "--emit", "llvm", "--passes", spec, "--no-verify-plugins")
    assert proc.returncode == 0, proc.stderr
    assert "define" in proc.stdout
