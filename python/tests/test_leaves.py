"""Leaves answered by Python code: what they receive, what they may return, how they fail,
and how they run (concurrently on the caller's loop, cancelled when the run gives up)."""

import asyncio
import threading

import pytest

import flowbox
from flowbox import errors


def test_a_leaf_gets_the_whole_request():
    seen = []

    async def leaf(request: flowbox.LeafRequest):
        seen.append(request)
        return "done"

    rt = flowbox.Runtime(leaf)
    script = (
        "return await agent({'task': 'x', 'n': 1}, label='L', instruction='be brief', "
        "tools=[], instance_id='a')"
    )
    assert rt.run_sync(script, thread_id="leaf-request").unwrap() == "done"
    (request,) = seen
    assert request.thread_id == "leaf-request"
    assert request.prompt == {"task": "x", "n": 1}
    assert request.prompt_text == '{"task":"x","n":1}'
    assert (request.label, request.instruction, request.tools) == ("L", "be brief", [])
    assert request.instance_id == "a" and request.schema is None
    assert request.conversation == []
    assert request.idempotency_key


def test_plain_functions_and_objects_with_a_leaf_method_answer_too():
    def sync_leaf(request):
        assert threading.current_thread() is not threading.main_thread()
        return request.prompt.upper()

    assert flowbox.Runtime(sync_leaf).run_sync("return await agent('abc')").unwrap() == "ABC"

    class Agents:
        async def leaf(self, request):
            return "from a method"

    assert flowbox.Runtime(Agents()).run_sync("return await agent('x')").unwrap() == "from a method"


def test_an_instance_keeps_its_conversation():
    conversations = []

    async def leaf(request):
        conversations.append(list(request.conversation))
        return f"reply {len(request.conversation) // 2}"

    rt = flowbox.Runtime(leaf)
    script = (
        "a = await agent('first', instance_id='i')\n"
        "b = await agent('second', instance_id='i')\n"
        "c = await agent('other')\n"
        "return [a, b, c]"
    )
    assert rt.run_sync(script).unwrap() == ["reply 0", "reply 1", "reply 0"]
    assert conversations[1] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply 0"},
    ]
    assert conversations[2] == []


def test_a_structured_leaf_returns_a_value_that_matches_its_schema():
    async def leaf(request):
        assert request.schema["type"] == "object"
        return {"score": 2**70, "ok": True}

    rt = flowbox.Runtime(leaf)
    schema = (
        "{'type': 'object', 'properties': {'score': {'type': 'integer'}}, 'required': ['score']}"
    )
    result = rt.run_sync(f"return await agent('rate', schema={schema})").unwrap()
    assert result == {"score": 2**70, "ok": True}


def test_a_reply_that_breaks_its_schema_is_the_leafs_error():
    async def leaf(request):
        return {"score": "high"}

    rt = flowbox.Runtime(leaf)
    script = (
        "try:\n"
        "    await agent('rate', schema={'type': 'object', 'properties': {'score': {'type': 'integer'}}})\n"
        "except AgentError as e:\n"
        "    return str(e)\n"
    )
    message = rt.run_sync(script).unwrap()
    assert "does not match its schema" in message and "score" in message


@pytest.mark.parametrize(
    "reply, expected",
    [
        (42, "replies with text (a str or a LeafReply), not a int"),
        ({"a": 1}, "not a dict"),
        (flowbox.LeafReply("x", usage=(1, 2)), "usage is a flowbox.Usage"),
        (flowbox.LeafReply(float("nan")), "the leaf's reply is nan"),
    ],
)
def test_a_leaf_returning_the_wrong_thing_fails_clearly(reply, expected):
    async def leaf(request):
        return reply

    rt = flowbox.Runtime(leaf)
    script = "try:\n    await agent('x')\nexcept AgentError as e:\n    return str(e)"
    assert expected in rt.run_sync(script).unwrap()


def test_a_raising_leaf_is_an_agent_error_with_its_retryability():
    calls = 0

    async def leaf(request):
        nonlocal calls
        calls += 1
        if request.prompt == "limited":
            raise flowbox.LeafError("rate limited", retryable=True)
        raise KeyError("missing")

    rt = flowbox.Runtime(leaf)
    script = (
        "out = []\n"
        "for p in ['limited', 'broken']:\n"
        "    try:\n"
        "        await agent(p)\n"
        "    except AgentError as e:\n"
        "        out.append([str(e), e.retryable])\n"
        "return out"
    )
    assert rt.run_sync(script).unwrap() == [
        ["rate limited", True],
        ["KeyError: 'missing'", False],
    ]
    uncaught = rt.run_sync("return await agent('broken')").error
    assert isinstance(uncaught, errors.ScriptFailed)
    assert uncaught.exception == "AgentError"


def test_usage_is_reported_or_estimated():
    async def leaf(request):
        if request.prompt == "counted":
            return flowbox.LeafReply("x", flowbox.Usage(input_tokens=100, output_tokens=7))
        return "y" * 30

    rt = flowbox.Runtime(leaf)
    counted = rt.run_sync("return await agent('counted')").summary
    assert (counted.input_tokens, counted.output_tokens, counted.estimated_tokens) == (100, 7, 0)
    estimated = rt.run_sync("return await agent('guess')").summary
    assert estimated.output_tokens == 10 and estimated.estimated_tokens == estimated.tokens_spent


def test_leaves_run_concurrently_up_to_the_limit(run):
    in_flight = 0
    most = 0

    async def leaf(request):
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.05)
        in_flight -= 1
        return str(request.prompt)

    rt = flowbox.Runtime(leaf, limits=flowbox.Limits(max_concurrency=3))
    script = "return await parallel([lambda i=i: agent(i) for i in range(10)])"
    outcome = run(rt.run(script))
    assert outcome.unwrap() == [str(i) for i in range(10)]
    assert most == 3


def test_a_hanging_leaf_is_cancelled_at_the_runs_deadline():
    cancelled = threading.Event()

    async def leaf(request):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    rt = flowbox.Runtime(leaf, limits=flowbox.Limits(timeout=0.5))
    outcome = rt.run_sync("return await agent('hang')")
    assert isinstance(outcome.error, errors.RunTimeout)
    assert isinstance(outcome.error, TimeoutError)
    # The loop ran the cancellation before run_sync returned, or runs it on the next turn.
    rt.run_sync("return 1")
    assert cancelled.is_set()


def test_cancelling_the_caller_stops_the_run_and_leaves_it_to_resume(run, tmp_path):
    cancelled = []
    hang = True

    started = asyncio.Event()

    async def leaf(request):
        if not hang:
            return "answered"
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(request.prompt)
            raise

    rt = flowbox.Runtime(leaf, journal=tmp_path / "j.db")

    async def main():
        nonlocal hang
        task = asyncio.create_task(rt.run("return await agent('wait')", thread_id="t-cancel"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(3000):  # the cancellation crosses the engine's thread and back
            if cancelled:
                break
            await asyncio.sleep(0.01)
        assert cancelled == ["wait"]
        hang = False
        return await rt.resume("t-cancel")

    assert run(main()).unwrap() == "answered"
