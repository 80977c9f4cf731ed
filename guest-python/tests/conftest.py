"""Fixtures shared by the SDK tests: a fresh fake host per test."""

import pytest
from fakehost import FakeHost


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()
