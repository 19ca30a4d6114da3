"""The comparison every compiled-code test relies on must itself fail where it should."""
from __future__ import annotations

import numpy as np
import pytest

from compare import assert_results_close


def test_agreeing_nan_and_inf_pass_and_do_not_hide_finite_errors():
    ref = {"f": np.array([np.nan, np.inf, -np.inf, 1.0, 2.0])}
    assert_results_close({"f": ref["f"].copy()}, ref, "float64")
    with pytest.raises(AssertionError, match="relative error"):
        assert_results_close({"f": np.array([np.nan, np.inf, -np.inf, 1.0, 2.1])}, ref, "float64")


@pytest.mark.parametrize("out", [
    [1.0, np.inf, -np.inf, 1.0, 2.0],      # a number where the reference is NaN
    [np.nan, np.inf, np.inf, 1.0, 2.0],    # the wrong infinity
    [np.nan, np.inf, -np.inf, np.nan, 2.0],  # NaN where the reference is finite
    [np.nan, np.inf, -np.inf, np.inf, 2.0],  # inf where the reference is finite
])
def test_misplaced_nan_or_inf_fails(out):
    ref = {"f": np.array([np.nan, np.inf, -np.inf, 1.0, 2.0])}
    with pytest.raises(AssertionError):
        assert_results_close({"f": np.array(out)}, ref, "float64")
