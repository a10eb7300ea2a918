"""Fixtures every package's tests use."""

import os

import pytest

# Every test's passes run eagerly unless it compiles them itself: compiling (core/compiled.py) costs
# seconds per graph, which tests/core/test_compiled.py pays once. Set before core is imported, and
# inherited by the app and command lines the tests start.
os.environ.setdefault("ENTROPYCACHE_COMPILE", "off")
# And on a fixed thread team (core/threads.py): a team sized by the machine's load would make a test's
# logits, by float rounding, depend on what else runs beside it.
os.environ.setdefault("ENTROPYCACHE_ADAPTIVE_THREADS", "0")


@pytest.fixture(params=["llada", "dream"])
def family(request) -> str:
    return request.param
