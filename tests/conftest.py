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


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ANN001 - pytest hook
    """Run the recorded-corpus tests after everything else (a stable partition: the rest keep their order)."""
    last = [item for item in items if item.get_closest_marker("recorded_corpus") is not None]
    if last:
        rest = [item for item in items if item.get_closest_marker("recorded_corpus") is None]
        items[:] = rest + last
