"""Any Array API namespace (array-api-strict here): what it alone refuses. (That it gives
NumPy's numbers, through the direct formula: test_backends.py.)"""

from __future__ import annotations

import pytest

import posenc

xps = pytest.importorskip("array_api_strict")


def test_array_api_strict_errors():
    with pytest.raises(posenc.PosencError, match="finite"):
        posenc.encode(xps.asarray([0.0, float("inf")]), 8)
    with pytest.raises(posenc.PosencError, match="integers or real numbers"):
        posenc.encode(xps.asarray([True, False]), 8)
    with pytest.raises(posenc.PosencError, match="`dtype` must be a float dtype"):
        posenc.encode(xps.asarray([1, 2]), 8, dtype=xps.int32)
