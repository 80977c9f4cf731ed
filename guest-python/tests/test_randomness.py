"""A run reseeds `random` from the host's randomness when the script can draw from the shared
generator, and only then: a guarded script that names neither `random` nor `statistics` is
spared the cost, and nothing it can do tells the difference."""

import random

import pytest

from fakehost import FakeHost
from flowbox_sdk import runner
from flowbox_sdk.script import may_use_random


@pytest.mark.parametrize(
    "source, may",
    [
        ("return 1", False),
        ("return await agent('review this')", False),
        ("import random\nreturn random.random()", True),
        ("from random import choice\nreturn choice([1, 2])", True),
        ("import statistics\nreturn statistics.NormalDist().samples(1)", True),
        ("from statistics import NormalDist as N\nreturn 1", True),
        ("return 'a random word in a prompt'", True),  # conservative: the text decides
        ("import ｒａｎｄｏｍ\nreturn 1", True),  # NFKC makes this `random`
    ],
)
def test_the_text_decides_whether_a_script_may_use_random(source, may):
    assert may_use_random(source) is may


def _state_after(source: str, guard: bool):
    random.seed(7)
    before = random.getstate()
    host = FakeHost(guard=guard)
    runner.run(host, source, "{}", host.settings)
    return before, random.getstate()


def test_a_script_that_cannot_reach_random_leaves_the_generator_alone():
    before, after = _state_after("return 1", guard=True)
    assert after == before


def test_a_script_that_may_reach_random_reseeds_it():
    before, after = _state_after("import random\nreturn 1", guard=True)
    assert after != before


def test_an_unguarded_script_always_reseeds():
    before, after = _state_after("return 1", guard=False)
    assert after != before
