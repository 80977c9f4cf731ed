"""The scheduler on its own: FIFO stepping, one await_next when all tasks are blocked, and the
host-side failures it turns into clear errors. Also the virtual time.sleep."""

import pytest
from fakehost import FakeHost

from flowbox_sdk.errors import CallFailed
from flowbox_sdk.host import virtual_sleep
from flowbox_sdk.primitives import make_primitives
from flowbox_sdk.scheduler import PARK, Scheduler


class Yields:
    """An awaitable that yields `value` once, as a foreign library's awaitable would."""

    def __init__(self, value):
        self.value = value

    def __await__(self):
        yield self.value
        return "resumed"


def test_run_returns_the_coroutine_value():
    async def body():
        return 7

    assert Scheduler(FakeHost()).run(body()) == 7


def test_run_raises_the_coroutine_error():
    async def body():
        raise KeyError("k")

    with pytest.raises(KeyError):
        Scheduler(FakeHost()).run(body())


def test_foreign_yield_is_answered_with_a_type_error():
    async def body():
        try:
            await Yields("tick")
        except TypeError as error:
            return str(error)

    message = Scheduler(FakeHost()).run(body())
    assert "it yielded str 'tick'" in message
    assert "asyncio is not available" in message


def test_park_without_a_wake_up_is_reported_as_a_deadlock():
    async def body():
        await Yields(PARK)

    host = FakeHost()
    with pytest.raises(RuntimeError, match="deadlock"):
        Scheduler(host).run(body())
    assert host.named("await_next") == []


def test_await_next_failure_ends_the_run():
    host = FakeHost()
    host.await_error = CallFailed("invalid-request", "journal diverged")
    failure = host.fail("return await agent('x')\n")
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "RuntimeError", None)
    assert failure.message == "the host could not deliver completions: journal diverged"


def test_unknown_handle_from_the_host_ends_the_run():
    host = FakeHost()
    real_await_next = host.await_next

    def await_next():
        completions = real_await_next()
        return [completions[0]._replace(handle=99)]

    host.await_next = await_next
    failure = host.fail("return await agent('x')\n")
    assert failure.exception == "RuntimeError"
    assert "unknown call 99" in failure.message


def test_an_unknown_handle_anywhere_in_a_batch_ends_the_run_before_any_task_steps():
    # The script's own call completes first in the batch, and would end the script: the unknown
    # one after it is still found, and no task has stepped on the batch.
    host = FakeHost()
    real_await_next = host.await_next

    def await_next():
        completions = real_await_next()
        return completions + [completions[0]._replace(handle=99)]

    host.await_next = await_next
    failure = host.fail("return await agent('x')\n")
    assert (failure.exception, failure.message) == (
        "RuntimeError", "the host completed an unknown call 99"
    )


def test_tasks_run_first_in_first_out():
    host = FakeHost()
    scheduler = Scheduler(host)
    primitives = make_primitives(host, scheduler)
    order = []

    def branch(name):
        async def run():
            order.append(f"{name} start")
            await primitives["agent"](name)
            order.append(f"{name} end")

        return run

    async def body():
        await primitives["parallel"]([branch("a"), branch("b")])

    host.deliver = lambda pending: list(reversed(pending))
    scheduler.run(body())
    assert order == ["a start", "b start", "b end", "a end"]
    assert len(host.named("await_next")) == 1


def test_each_run_gets_a_fresh_scheduler(host):
    script = "return await parallel([lambda: agent('x')])\n"
    host.run(script)
    host.run(script)
    assert [r.path for r in host.agent_requests] == [[(1, 0, 1, None)]] * 2


# --- time.sleep ----------------------------------------------------------------------------


def test_virtual_sleep_advances_the_host_clock(host):
    sleep = virtual_sleep(host)
    sleep(1.5)
    sleep(0)
    sleep(2)
    assert host.named("sleep") == [(1_500_000_000,), (0,), (2_000_000_000,)]


@pytest.mark.parametrize(
    "seconds, error",
    [(-1, ValueError), (float("nan"), ValueError), ("1", TypeError), (2.0**64, OverflowError)],
)
def test_virtual_sleep_rejects_what_time_sleep_rejects(host, seconds, error):
    with pytest.raises(error):
        virtual_sleep(host)(seconds)
    assert host.named("sleep") == []
