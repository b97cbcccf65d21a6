"""tests.helpers.digits reads scikit-learn's digits CSV directly (to spare test subprocesses
the import of sklearn.datasets): it must give exactly what load_digits gives."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits

from tests.helpers import digits


def test_digits_equal_load_digits() -> None:
    want_x, want_y = load_digits(return_X_y=True)
    x, y = digits()
    assert x.shape == (1797, 64) and x.dtype == np.float32
    assert y.shape == (1797,) and y.dtype == np.int32
    np.testing.assert_array_equal(x, (want_x / 16.0).astype(np.float32))
    np.testing.assert_array_equal(y, want_y.astype(np.int32))
    first_x, first_y = digits(200)
    np.testing.assert_array_equal(first_x, x[:200])
    np.testing.assert_array_equal(first_y, y[:200])
