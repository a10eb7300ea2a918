"""Fixtures every package's tests use."""

import pytest


@pytest.fixture(params=["llada", "dream"])
def family(request) -> str:
    return request.param
