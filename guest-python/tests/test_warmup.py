"""The build-time warm-up (flowbox_sdk.warmup): every script of it runs to its result, and it
leaves nothing a later run could see."""

import json

from fakehost import FakeHost, src
from flowbox_sdk import warmup


def test_every_warmup_script_runs_to_its_result():
    results = [json.loads(result) for result in warmup.warm_up(rounds=1)]
    assert results == [
        1,
        "ok",
        {
            "replies": ["ok"] * 8,
            "count": 8,
            "ok": True,
            "none": None,
            "ratio": 0.5,
        },
        [{"text": "{}", "index": index} for index in range(4)],
        json.dumps({"n": 3, "spent": 0, "left": None}),
        ["ok", None],
    ]


def test_a_run_after_the_warmup_sees_what_it_would_without_it():
    script = src(
        """
        import random
        random.seed(7)
        replies = await parallel([lambda i=i: agent(f"q {i}") for i in range(3)])
        return {"replies": replies, "draw": random.random()}
        """
    )
    before = FakeHost()
    expected = before.run(script)
    warmup.warm_up(rounds=2)
    after = FakeHost()
    assert after.run(script) == expected
    assert after.calls == before.calls
