"""The target registry (tcc.targets): built-in targets, out-of-tree ones through entry points, errors.

The compiler asks a target object, never its name, so a target found
through the entry-point group ``tcc.targets`` compiles and runs like a
built-in one; these tests use one that lowers for the host and counts what
it loads.
"""
from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

import tcc
import tcc.targets as targets
from tcc.backends import BUILTIN_TARGETS
from tcc.backends.builtin_targets import DEFAULT_GPU_PIPELINE, DEFAULT_LOOP_PIPELINE, CpuTarget
from tcc.backends.target import Target
from tcc.diagnostics import TccError

SRC = "input x[n]\ny[i] = 2 * x[i] + 1\n"


def test_builtin_targets_resolve():
    assert targets.available_targets() == ["cpu", "cuda", "cuda-sim"]
    for name in BUILTIN_TARGETS:
        target = targets.get_target(name)
        assert isinstance(target, Target) and target.name == name
        assert targets.get_target(name) is target  # loaded once
    assert targets.get_target("cpu").default_pipeline == DEFAULT_LOOP_PIPELINE
    assert targets.get_target("cuda").default_pipeline == DEFAULT_GPU_PIPELINE
    assert targets.get_target("cuda").emit_passes == ("emit-ptx",)
    assert targets.get_target("cuda-sim").lower_llvm_options("float32") == "dtype=float32 target=cuda-sim reassociate=never"


def test_cli_and_build_list_the_builtin_targets():
    import tcc.cli.driver

    assert tcc.cli.driver.TARGETS == list(BUILTIN_TARGETS)


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(TccError) as info:
        targets.get_target("tpu")
    assert info.value.message == "unknown target 'tpu' (available: cpu, cuda, cuda-sim)"
    with pytest.raises(TccError, match=r"unknown target 'tpu' \(available: cpu, cuda, cuda-sim\)"):
        tcc.compile(SRC, target="tpu")


class Counting(CpuTarget):
    """An out-of-tree target: the host's code, loaded through the CPU backend, counted."""

    name = "t-counting"
    lowering_target = "cpu"
    loads = 0

    def load(self, final):
        type(self).loads += 1
        return super().load(final)


class FakeEP:
    def __init__(self, name, value, obj):
        self.name, self.value, self.group, self._obj = name, value, "tcc.targets", obj

    def load(self):
        return self._obj


def _patch_eps(monkeypatch, eps):
    def entry_points(**kw):
        return list(eps) if kw.get("group") == "tcc.targets" else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_entry_point_target_is_found_and_runs(monkeypatch):
    _patch_eps(monkeypatch, [FakeEP("t-counting", "pkg.mod:Counting", Counting)])
    assert "t-counting" in targets.available_targets()
    assert isinstance(targets.get_target("t-counting"), Counting)
    before = Counting.loads
    f = tcc.compile(SRC, target="t-counting")
    assert Counting.loads == before + 1
    x = np.arange(5.0)
    np.testing.assert_array_equal(f(x=x)["y"], 2 * x + 1)
    assert repr(f).endswith("float64 on cpu>")  # the code is the host's
    _patch_eps(monkeypatch, [])
    with pytest.raises(TccError, match="unknown target 't-counting'"):
        targets.get_target("t-counting")


def test_entry_point_errors(monkeypatch):
    _patch_eps(monkeypatch, [FakeEP("cpu", "pkg.mod:Counting", Counting)])
    with pytest.raises(TccError, match="external target 'cpu' .* conflicts with the built-in target"):
        targets.get_target("cpu")
    _patch_eps(monkeypatch, [FakeEP("t-other", "pkg.mod:Counting", Counting)])
    with pytest.raises(TccError, match="is named 't-other' but its target Counting has name 't-counting'"):
        targets.get_target("t-other")
    _patch_eps(monkeypatch, [FakeEP("t-x", "a:X", object()), FakeEP("t-x", "b:X", object())])
    with pytest.raises(TccError, match="provided twice"):
        targets.get_target("t-x")
    _patch_eps(monkeypatch, [FakeEP("t-x", "a:X", object())])
    with pytest.raises(TccError, match="is not a tcc Target"):
        targets.get_target("t-x")


def test_register_target():
    try:
        registered = targets.register_target(Counting)
        assert targets.get_target("t-counting") is registered
        with pytest.raises(TccError, match="already a built-in target"):

            class Shadow(CpuTarget):
                name = "cpu"

            targets.register_target(Shadow)
        with pytest.raises(TypeError):
            targets.register_target(object())  # type: ignore[arg-type]
    finally:
        targets.unregister_target("t-counting")
    with pytest.raises(TccError, match="unknown target"):
        targets.get_target("t-counting")


def test_check_runs_on_a_registered_target_and_names_the_known_ones():
    """``tcc.check`` asks the registry too: a registered target checks gradients like a built-in
    one, and an unknown name lists every target the registry knows."""
    Counting.loads = 0
    targets.register_target(Counting)
    try:
        src = "input x[n]\ny[i] = x[i] ** 3\n"
        result = tcc.check(src, of="y", wrt="x", sizes={"n": 4}, target="t-counting")
        assert [r.ok for r in result] == [True] and Counting.loads == 2  # the function and its derivative program
        with pytest.raises(TccError) as info:
            tcc.check(src, of="y", wrt="x", sizes={"n": 4}, target="tpu")
        assert info.value.message == "unknown check target 'tpu' (choose cpu, cuda, cuda-sim, t-counting or reference)"
    finally:
        targets.unregister_target("t-counting")
