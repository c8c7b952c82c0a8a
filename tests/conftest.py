"""pytest fixtures shared by the tests (plain helpers live in helpers.py)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import bits


@pytest.fixture
def assert_bits():
    """assert_bits(got, value, dtype): got has that dtype and the bit pattern of value in it."""

    def check(got, want_value, dtype=np.float32):
        got = np.asarray(got)
        assert got.dtype == np.dtype(dtype), got.dtype
        want = np.asarray(want_value, dtype=np.float64).astype(dtype)
        assert bits(got).tolist() == bits(want).tolist(), (got, want)

    return check
