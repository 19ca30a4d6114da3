"""Shared test configuration.

Property tests must not make CI flaky: under ``CI`` the examples are derived
deterministically from each test (the same examples every run) and no test has
a deadline (the CI machine is shared and its timing noisy).  Locally tests run
with fresh random examples and no deadline either.
"""
from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("tcc-ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("tcc-dev", deadline=None, print_blob=True)
settings.load_profile("tcc-ci" if os.environ.get("CI") else "tcc-dev")


# ---------------------------------------------------------------------------
# Every derivative program the suite produces is also compiled and checked
# (tests/test_zz_recorded_derivatives.py, which runs last): the pipeline
# runner is wrapped once, before the test modules import it.
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
