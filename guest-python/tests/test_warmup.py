"""The build-time warm-up (flowbox_sdk.warmup): every script of it runs to its result, and it
leaves nothing a later run could see; nor does the kit `make_ready` makes ahead of a run."""

import json

from fakehost import FakeHost, src
from flowbox_sdk import make_ready, runner, warmup


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


# Reads a global an earlier run in the same namespace would have left, then leaves one.
_LEAVES_A_GLOBAL = src(
    """
    try:
        previous = left_behind
    except NameError:
        previous = None
    left_behind = args["n"]
    async def main():
        print("run", args["n"])
        return {"previous": previous, "budget": budget.remaining()}
    """
)


def test_the_kit_made_ahead_serves_exactly_one_run():
    host = FakeHost()
    make_ready(host)
    kit = runner._ready_kit
    assert host.run(_LEAVES_A_GLOBAL, {"n": 1}) == {"previous": None, "budget": None}
    assert runner._ready_kit is None
    assert kit.namespace["left_behind"] == 1  # the first run ran in the kit's namespace
    # The next run makes its own: nothing of the first run's globals reaches it.
    assert host.run(_LEAVES_A_GLOBAL, {"n": 2}) == {"previous": None, "budget": None}
    assert host.logs == ["run 1", "run 2"]


def test_a_kit_made_for_another_host_is_not_used():
    mine, other = FakeHost(), FakeHost()
    other.budget_total = 10
    make_ready(mine)
    assert other.run(_LEAVES_A_GLOBAL, {"n": 1}) == {"previous": None, "budget": 10}
    assert runner._ready_kit is None
    assert mine.calls == []
    assert other.logs == ["run 1"]


def test_an_unguarded_run_from_the_kit_gets_every_builtin():
    host = FakeHost(guard=False)
    make_ready(host)
    assert host.run("return open.__name__") == "open"
    assert runner._ready_kit is None
    assert FakeHost().fail("return open.__name__").kind == "forbidden"
