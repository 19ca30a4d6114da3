"""Shared test configuration.

Property tests must not make CI flaky: under ``CI`` the examples are derived
deterministically from each test (the same examples every run) and no test has
a deadline (the CI machine is shared and its timing noisy).  Locally tests run
with fresh random examples and no deadline either.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
from hypothesis import settings

# The on-disk compile cache (tcc.build.disk_cache) of a test session is a fresh temporary
# directory, removed at exit, also for the subprocesses the tests start: the suite
# never writes into the user's cache and needs no writable home.
_CACHE_DIR = tempfile.mkdtemp(prefix="tcc-test-cache-")
os.environ["TCC_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)

# Split every parallel kernel however small (the runtime's default leaves kernels
# under ~32k iterations on one thread), so the suite's small programs exercise the
# pool with threads > 1; tests/test_parallel_grain.py checks the default itself.
os.environ["TCC_PARALLEL_GRAIN"] = "0"

settings.register_profile("tcc-ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("tcc-dev", deadline=None, print_blob=True)
settings.load_profile("tcc-ci" if os.environ.get("CI") else "tcc-dev")


# ---------------------------------------------------------------------------
# Every derivative program the suite produces is also compiled and checked
# (tests/test_recorded_derivatives.py): the pipeline runner is wrapped once,
# before the test modules import it, and the tests marked ``recorded_corpus``
# are moved behind every other collected test, whatever their file is called
# and in whatever order the files were given, so they see the whole corpus.
# ---------------------------------------------------------------------------

RECORDED_DERIVATIVES: dict[str, object] = {}


def pytest_configure(config) -> None:  # noqa: ANN001 - pytest hook
    import tcc.pipeline as pipeline
    from tcc.ir.program import Program

    original = pipeline.run_pipeline
    if getattr(original, "_tcc_recording", False):
        return

    def recording(program, passes, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        result = original(program, passes, *args, **kwargs)
        try:
            names = [p.name for p in pipeline.resolve_pipeline(passes)]
        except Exception:  # noqa: BLE001 - never change what the test sees
            return result
        if "autodiff" in names and isinstance(result, Program) and len(RECORDED_DERIVATIVES) < 400:
            RECORDED_DERIVATIVES.setdefault(str(result), result)
        return result

    recording._tcc_recording = True  # type: ignore[attr-defined]
    pipeline.run_pipeline = recording


# ---------------------------------------------------------------------------
# The fast tier: `pytest -m "not slow"` (docs/testing.md).  Slow tests are listed
# here, not marked in their files, so the tier is one list to keep up to date.
# Chosen from `--durations` runs of each file (2 loaded cores, 2026-12-02): whole
# modules of generated programs (fuzzers, property tests, framework round trips)
# and single tests of 2 s or more.
# ---------------------------------------------------------------------------

SLOW_MODULES = frozenset({
    "test_fuzz_differential.py",    # 35 s: 36 generated programs through every stage
    "test_compiled_properties.py",  # 21 s: hypothesis programs compiled and simulated
    "test_autodiff_properties.py",  # 14 s: hypothesis derivatives against finite differences
    "test_fuzz_edge.py",            # 5 s: generated programs on edge data
    "test_disk_cache_fuzz.py",      # 4 s: fuzzed cache entries
    "test_jax_function.py",         # 26 s: JAX's check_grads on every example
    "test_torch_function.py",       # 18 s: torch.autograd round trips
})

SLOW_TESTS = frozenset({  # (module, test function): 2 s or more each
    ("test_runtime_reliability.py", "test_generating_ptx_does_not_leak_native_memory"),
    ("test_fuse_rows.py", "test_generated_chains_fuse_exactly_where_rows_allow"),
    ("test_disk_cache.py", "test_a_program_too_deep_to_pickle_compiles_uncached"),
    ("test_forward_mode.py", "test_inferred_programs_adjoint_identity"),
    ("test_gram.py", "test_generated_weighted_products_become_gram_and_match"),
})


def _mark_slow(items) -> None:  # noqa: ANN001 - pytest items

    for item in items:
        module = item.path.name
        name = getattr(item, "originalname", None) or item.name
        if module in SLOW_MODULES or (module, name) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection
def pytest_collection_modifyitems(config, items) -> None:  # noqa: ANN001 - pytest hook
    """Mark the slow tier, then run the recorded-corpus tests after everything else (a stable
    partition: the rest keep their order)."""
    _mark_slow(items)
    last = [item for item in items if item.get_closest_marker("recorded_corpus") is not None]
    if last:
        rest = [item for item in items if item.get_closest_marker("recorded_corpus") is None]
        items[:] = rest + last
