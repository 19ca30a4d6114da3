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
