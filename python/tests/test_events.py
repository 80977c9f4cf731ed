"""Events: as an async iterator and as a callback."""

import asyncio
import sys
import time

import flowbox


def collect(rt, script):
    """Runs `script` and returns its outcome and its events, through its `run_finished`."""

    async def main():
        async with rt.events(lossless=True) as events:
            outcome = await rt.run(script)
            seen = []
            async for event in events:
                seen.append(event)
                if isinstance(event, flowbox.RunFinished):
                    break
        return outcome, seen

    return asyncio.run(main())


def test_events_arrive_in_order_for_a_run():
    async def leaf(request):
        return "ok"

    rt = flowbox.Runtime(leaf)
    outcome, seen = collect(rt, "phase('one')\nlog('hello')\nreturn await agent('x')")
    types = [event.type for event in seen]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert ["phase", "log", "leaf_started", "leaf_finished"] == [
        t for t in types if t in ("phase", "log", "leaf_started", "leaf_finished")
    ]
    assert [event.seq for event in seen] == list(range(1, len(seen) + 1))
    assert {event.thread_id for event in seen} == {outcome.thread_id}
    log = next(event for event in seen if event.type == "log")
    assert isinstance(log, flowbox.Log) and log.message == "hello"
    started = next(event for event in seen if isinstance(event, flowbox.LeafStarted))
    assert started.prompt_preview == "x" and started.path == []
    assert started.model is None and started.waited_ms == 0 and started.fed_by == []
    times = [event.unix_us for event in seen]
    assert all(isinstance(t, int) for t in times) and times == sorted(times)
    finished = seen[-1]
    assert isinstance(finished, flowbox.RunFinished) and finished.ok
    assert finished.summary.leaves == 1 and finished.error is None


def test_a_callback_gets_every_event_and_can_stop():
    got = []
    rt = flowbox.Runtime("fake")
    stop = rt.subscribe(got.append, lossless=True)
    rt.run_sync("log('a')\nreturn 1")
    # Delivery runs on the engine's thread, a moment behind the outcome.
    deadline = time.monotonic() + 30
    while not any(event.type == "run_finished" for event in got) and time.monotonic() < deadline:
        time.sleep(0.01)
    stop()
    count = len(got)
    assert got[0].type == "run_started" and got[-1].type == "run_finished"
    rt.run_sync("return 2")
    assert len(got) == count


def test_a_callback_that_raises_is_reported_and_ends_its_subscription_not_the_run(monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: reported.append(unraisable))
    got = []

    def callback(event):
        got.append(event)
        raise ValueError("subscriber broke")

    rt = flowbox.Runtime("fake")
    rt.subscribe(callback)
    assert rt.run_sync("log('a')\nreturn 1").unwrap() == 1
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rt.run_sync("return 2").unwrap() == 2
    time.sleep(0.2)
    assert len(got) == 1
    assert [str(r.exc_value) for r in reported] == ["subscriber broke"]


def test_a_leaf_quoting_a_reply_is_fed_by_it():
    rt = flowbox.Runtime("fake")
    _, seen = collect(
        rt,
        "plan = await agent('plan the whole thing')\nreturn await agent(f'carry out: {plan}')",
    )
    first, second = [event for event in seen if isinstance(event, flowbox.LeafStarted)]
    assert first.fed_by == [] and second.fed_by == [first.call_id]


def test_events_are_typed_with_their_positions_and_errors():
    rt = flowbox.Runtime("fake")
    outcome, seen = collect(rt, "await pipeline([1, 2], lambda x: agent(str(x)))\nreturn 1 / 0")
    starts = [event for event in seen if isinstance(event, flowbox.LeafStarted)]
    assert [start.path[0].index for start in starts] == [0, 1]
    assert {(p.kind, p.size, p.stage) for s in starts for p in s.path} == {("pipeline", 2, 1)}
    finished = seen[-1]
    assert not finished.ok and isinstance(finished.error, flowbox.errors.ScriptFailed)
    assert finished.error.exception == "ZeroDivisionError" and finished.error.line == 2
    unknown = flowbox.Event.from_json({"thread_id": "t", "seq": 1, "type": "new_kind", "x": 1})
    assert isinstance(unknown, flowbox.UnknownEvent) and unknown.type_name == "new_kind"
    assert unknown.unix_us is None and unknown.data["x"] == 1
    turn = flowbox.Event.from_json(
        {
            "thread_id": "t",
            "seq": 2,
            "unix_us": 7,
            "type": "leaf_turn",
            "call_id": 3,
            "model": "m",
            "input_tokens": 11,
            "output_tokens": 5,
            "duration_ms": 9,
            "error": None,
        }
    )
    priced = flowbox.Event.from_json(
        {
            "thread_id": "t",
            "seq": 3,
            "type": "leaf_finished",
            "call_id": 3,
            "ok": True,
            "tokens": 6,
            "duration_ms": 0,
            "replayed": False,
            "error": None,
            "cost_usd": 4.5e-05,
        }
    )
    assert isinstance(priced, flowbox.LeafFinished) and priced.cost_usd == 4.5e-05
    assert turn == flowbox.LeafTurn(
        thread_id="t",
        seq=2,
        unix_us=7,
        call_id=3,
        model="m",
        input_tokens=11,
        output_tokens=5,
        duration_ms=9,
    )
    retried = flowbox.Event.from_json(
        {"thread_id": "t", "seq": 4, "type": "leaf_turn", "call_id": 3, "retries": 2}
    )
    assert isinstance(retried, flowbox.LeafTurn) and retried.retries == 2 and turn.retries == 0


def test_closing_the_events_ends_their_iteration(run):
    rt = flowbox.Runtime("fake")

    async def main():
        events = rt.events()
        asyncio.get_running_loop().call_later(0.05, events.close)
        return [event async for event in events]

    assert run(main()) == []
