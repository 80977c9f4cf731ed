"""Runs, their results and their errors: exact JSON both ways, the error classes, limits."""

import asyncio
import threading
from decimal import Decimal

import pytest

import flowbox
from flowbox import errors


async def echo(request):
    return f"echo: {request.prompt_text}"


def test_a_run_returns_its_result_and_summary():
    rt = flowbox.Runtime(echo)
    outcome = rt.run_sync("return await agent('hi')")
    assert outcome.ok and outcome.error is None
    assert outcome.result == "echo: hi"
    assert outcome.summary.leaves == 1
    assert outcome.summary.fuel_used > 0
    assert outcome.thread_id == outcome.summary.thread_id


def test_json_crosses_both_ways_unchanged():
    rt = flowbox.Runtime("fake")
    args = {
        "z": 1,
        "big": 2**200,
        "neg": -(2**70),
        "float": 0.1 + 0.2,
        "tiny": 5e-324,
        "minus_zero": -0.0,
        "text": 'naïve ✓ \u0000 "quoted"',
        "nested": [{"b": 1, "a": 2}, None, True],
    }
    result = rt.run_sync("return {'echo': args, 'keys': list(args)}", args).unwrap()
    assert result["echo"] == args
    assert list(result["echo"]) == list(args)
    assert result["keys"] == list(args)
    assert list(result["echo"]["nested"][0]) == ["b", "a"]
    assert repr(result["echo"]["minus_zero"]) == "-0.0"
    assert result["echo"]["float"].hex() == (0.1 + 0.2).hex()
    assert type(result["echo"]["big"]) is int


def test_a_number_past_a_floats_range_reads_back_exact():
    # JSON allows numbers a float cannot hold; one keeps its text as a Decimal rather than
    # becoming infinity.
    from flowbox import _json

    assert _json.loads('{"n": 1e400}') == {"n": Decimal("1e400")}
    assert _json.loads("[1.5, -0.0]")[1].hex() == "-0x0.0p+0"


@pytest.mark.parametrize(
    "args, where",
    [
        ({"x": float("nan")}, "args['x']"),
        ({"x": float("inf")}, "args['x']"),
        ({1: "a"}, "args has the key 1"),
        ({"s": {1, 2}}, "args['s'] is a set"),
        ({"b": b"bytes"}, "args['b'] is a bytes"),
    ],
)
def test_args_that_are_not_json_are_refused_with_where(args, where):
    rt = flowbox.Runtime("fake")
    with pytest.raises(errors.InvalidArgs) as raised:
        rt.run_sync("return 1", args)
    assert where in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_bad_input_to_the_runtime_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        flowbox.Runtime("nope")
    with pytest.raises(TypeError, match="not 42"):
        flowbox.Runtime(42)
    with pytest.raises(TypeError, match="use @flowbox.tool"):
        flowbox.Runtime("fake", tools=[print])
    with pytest.raises(ValueError, match="warm_pool"):
        flowbox.Runtime("fake", warm_pool=-1)
    with pytest.raises(errors.SetupError, match="file.json"):
        flowbox.Runtime("scripted:/no/such/file.json")
    rt = flowbox.Runtime("fake")
    with pytest.raises(TypeError, match="script is a str"):
        rt.run_sync(b"return 1")


def test_errors_have_their_class_line_and_hint():
    rt = flowbox.Runtime("fake")
    failed = rt.run_sync("x = 1\nreturn 1 / 0")
    assert not failed.ok
    error = failed.error
    assert isinstance(error, errors.ScriptFailed)
    assert (error.kind, error.line, error.exception) == ("uncaught", 2, "ZeroDivisionError")
    assert error.hint
    assert error.summary.thread_id == failed.thread_id
    with pytest.raises(errors.ScriptFailed):
        failed.unwrap()

    rejected = rt.run_sync("import os\nreturn 1").error
    assert isinstance(rejected, errors.ScriptRejected)
    assert (rejected.kind, rejected.line) == ("forbidden", 1)

    syntax = rt.run_sync("return (").error
    assert isinstance(syntax, errors.ScriptRejected) and syntax.kind == "syntax"

    not_json = rt.run_sync("return {1, 2}").error
    assert isinstance(not_json, errors.ScriptFailed) and not_json.kind == "invalid_result"


def test_check_returns_meta_or_raises():
    rt = flowbox.Runtime("fake")
    meta = rt.check_sync("meta = {'name': 'x', 'description': 'd'}\nreturn 1")
    assert meta == {"name": "x", "description": "d"}
    assert rt.check_sync("return 1") is None
    with pytest.raises(errors.ScriptRejected) as raised:
        rt.check_sync("open('/etc/passwd')\nreturn 1")
    assert raised.value.kind == "forbidden" and raised.value.line == 1


def test_fuel_limit_holds_and_is_breached():
    rt = flowbox.Runtime("fake", limits=flowbox.Limits(fuel=50_000_000))
    assert rt.run_sync("return sum(range(1000))").unwrap() == 499500
    breached = rt.run_sync("n = 0\nwhile True:\n    n += 1\nreturn n").error
    assert isinstance(breached, errors.OutOfFuel)
    assert isinstance(breached, errors.LimitExceeded)
    # A run's own limits override the runtime's.
    small = rt.run_sync("return sum(range(100000))", limits=flowbox.Limits(fuel=2_000_000))
    assert isinstance(small.error, errors.OutOfFuel)


def test_memory_and_time_limits_are_breached_with_their_classes():
    rt = flowbox.Runtime("fake", limits=flowbox.Limits(memory_bytes=64 << 20, timeout=1.0))
    memory = rt.run_sync("x = 'a' * (200 << 20)\nreturn len(x)").error
    assert isinstance(memory, errors.OutOfMemory)
    assert isinstance(memory, MemoryError)


def test_invalid_limits_are_refused():
    with pytest.raises(errors.SetupError, match="max_concurrency"):
        flowbox.Runtime("fake", limits=flowbox.Limits(max_concurrency=0))
    rt = flowbox.Runtime("fake")
    with pytest.raises(errors.InvalidLimits, match="max_concurrency must be from 1"):
        rt.run_sync("return 1", limits=flowbox.Limits(max_concurrency=0))
    with pytest.raises(errors.InvalidLimits, match="negative"):
        asyncio.run(rt.plan("return 1", limits=flowbox.Limits(timeout=-1.0)))


def test_the_engine_never_holds_the_gil_while_a_script_runs():
    rt = flowbox.Runtime("fake", limits=flowbox.Limits(fuel=10**12, timeout=60))
    ticks = 0
    done = threading.Event()

    def count():
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    counter = threading.Thread(target=count)
    counter.start()
    before = ticks
    try:
        rt.run_sync("n = 0\nfor i in range(3_000_000):\n    n += i\nreturn n").unwrap()
        during = ticks - before
    finally:
        done.set()
        counter.join()
    assert during > 1000


def test_sync_calls_work_inside_a_running_loop_as_in_a_notebook(run):
    async def leaf(request):
        return "from the runtime's loop"

    rt = flowbox.Runtime(leaf)

    async def main():
        assert rt.run_sync("return await agent('x')").unwrap() == "from the runtime's loop"
        assert rt.check_sync("return 1") is None
        return (await rt.run("return 2")).unwrap()

    assert run(main()) == 2


def test_a_runtime_serves_one_event_loop_at_a_time():
    release = threading.Event()
    started = threading.Event()

    async def slow(request):
        started.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait)
        return "ok"

    rt = flowbox.Runtime(slow)
    errors_seen = []

    def other_loop():
        async def go():
            await asyncio.get_running_loop().run_in_executor(None, started.wait)
            try:
                await rt.run("return 1")
            except RuntimeError as error:
                errors_seen.append(str(error))
            finally:
                release.set()

        asyncio.run(go())

    thread = threading.Thread(target=other_loop)
    thread.start()
    assert rt.run_sync("return await agent('x')").unwrap() == "ok"
    thread.join()
    assert errors_seen and "one event loop at a time" in errors_seen[0]


def test_a_plan_counts_the_leaves_without_calling_them():
    called = []

    async def leaf(request):
        called.append(request.prompt)
        return "x"

    rt = flowbox.Runtime(leaf)
    script = (
        "meta = {'name': 'fan', 'description': 'd'}\n"
        "r = await parallel([lambda i=i: agent(f'item {i}') for i in range(args['n'])])\n"
        "return await agent('sum up', schema={'type': 'object'})"
    )
    plan = asyncio.run(rt.plan(script, {"n": 4}))
    assert (plan["name"], plan["leaves"], plan["widest_fanout"], plan["waves"]) == ("fan", 5, 4, 2)
    assert called == []
    with pytest.raises(errors.ScriptRejected):
        asyncio.run(rt.plan("import os\nreturn 1"))


def test_a_warm_pool_serves_runs_with_the_same_result_and_fuel():
    fresh = flowbox.Runtime("fake")
    assert fresh.warm_pool is None
    pooled = flowbox.Runtime("fake", warm_pool=2)
    for _ in range(200):
        if pooled.warm_pool["ready"] == 2:
            break
        threading.Event().wait(0.05)
    script = "return {'n': sum(range(100))}"
    a, b = fresh.run_sync(script), pooled.run_sync(script)
    assert a.unwrap() == b.unwrap() == {"n": 4950}
    assert a.summary.fuel_used == b.summary.fuel_used
    assert pooled.warm_pool["hits"] == 1 and pooled.warm_pool["capacity"] == 2


def test_a_runs_limits_override_only_the_fields_they_set():
    rt = flowbox.Runtime("fake", limits=flowbox.Limits(fuel=30_000_000))
    loop = "n = 0\nwhile True:\n    n += 1\nreturn n"
    outcome = rt.run_sync(loop, limits=flowbox.Limits(timeout=60))
    assert isinstance(outcome.error, errors.OutOfFuel)
    assert outcome.summary.fuel_used <= 30_000_000


def test_text_that_is_not_utf8_and_tiny_numbers_are_not_altered():
    rt = flowbox.Runtime("fake")
    with pytest.raises(errors.InvalidArgs, match="lone surrogate"):
        rt.run_sync("return 1", {"s": "\ud83d"})
    from flowbox import _json

    assert _json.loads("[1e-400, 0.0, 0e5]") == [Decimal("1e-400"), 0.0, 0.0]


def test_a_runtime_its_leaf_refers_to_is_collected():
    import gc
    import weakref

    def make():
        rt = None

        async def leaf(request):
            return str(rt.guest_sha256 is not None)

        rt = flowbox.Runtime(leaf)
        assert rt.run_sync("return await agent('x')").unwrap() == "True"
        return weakref.ref(rt)

    collected = make()
    gc.collect()
    assert collected() is None


def test_closing_a_runtime_ends_the_runs_in_flight_with_an_error(run):
    started = asyncio.Event()

    async def leaf(request):
        started.set()
        await asyncio.sleep(3600)

    rt = flowbox.Runtime(leaf)

    async def main():
        task = asyncio.create_task(rt.run("return await agent('x')"))
        await started.wait()
        rt.close()
        with pytest.raises(errors.MachineryError, match="runtime was closed"):
            await task
        with pytest.raises(RuntimeError, match="closed"):
            await rt.run("return 1")

    run(main())


def test_runs_move_from_one_event_loop_to_another():
    async def leaf(request):
        if request.prompt == "hang":
            await asyncio.sleep(3600)
        return "ok"

    rt = flowbox.Runtime(leaf)
    # The run ends at its deadline with its leaf in flight; the leaf's cancellation may reach
    # this loop after run_sync has stopped it.
    hung = rt.run_sync("return await agent('hang')", limits=flowbox.Limits(timeout=0.3))
    assert isinstance(hung.error, errors.RunTimeout)
    for _ in range(3):
        assert asyncio.run(rt.run("return await agent('x')")).unwrap() == "ok"
    assert rt.run_sync("return await agent('y')").unwrap() == "ok"
