"""Shared helpers of the package's tests: every test runs real scripts in the real guest."""

import asyncio

import pytest


@pytest.fixture
def run():
    """Runs a coroutine to its end on a fresh event loop."""
    return asyncio.run
