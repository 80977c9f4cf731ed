"""The deterministic coroutine scheduler: a FIFO ready queue of tasks, one `await_next()` call
whenever every task is blocked, and wake-ups in the order the host delivers completions. Given
the same completions, a run takes exactly the same steps, which is what makes replay exact.
"""

from collections import deque
from collections.abc import Coroutine
from typing import Any

from .errors import CallFailed
from .host import Host

# What the SDK's awaitables yield to say "this task is blocked; I arranged its wake-up".
# Anything else reaching the scheduler came from an awaitable flowbox does not know.
PARK = object()


class Task:
    """One line of execution, with its place in the script's tree of groups (`path`, never changed
    once made, so the host may keep the list it is given). The scheduler calls `step` with what
    the task was woken with; a step runs until the task blocks or finishes."""

    __slots__ = ("path",)

    def step(self, scheduler: "Scheduler", value: Any, error: BaseException | None) -> None:
        raise NotImplementedError


class CoroutineTask(Task):
    """A task that drives a coroutine; `finish` gets its value or the exception it raised."""

    __slots__ = ("coroutine",)

    def step(self, scheduler, value, error):
        try:
            if error is not None:
                yielded = self.coroutine.throw(error)
            else:
                yielded = self.coroutine.send(value)
        except StopIteration as stop:
            self.finish(stop.value, None)
        except BaseException as failure:  # the task's own error, reported to whoever awaits it
            self.finish(None, failure)
        else:
            if yielded is not PARK:
                scheduler.resume(self, error=TypeError(foreign_await_message(yielded)))

    def finish(self, value: Any, error: BaseException | None) -> None:
        raise NotImplementedError


class _Main(CoroutineTask):
    """The script's entry point; the run ends when it finishes."""

    __slots__ = ("outcome",)

    def __init__(self, coroutine: Coroutine):
        self.path = []
        self.coroutine = coroutine
        self.outcome = None

    def finish(self, value, error):
        self.outcome = (value, error)


class _FirstSteps(Task):
    """Takes the first step of each of some new tasks, in order. The same as queueing each on its
    own: the queue is first in, first out, so nothing could run between them anyway."""

    __slots__ = ("tasks",)

    def __init__(self, tasks: list[Task]):
        self.tasks = tasks

    def step(self, scheduler, value, error):
        for task in self.tasks:
            scheduler.current = task
            task.step(scheduler, None, None)


class Scheduler:
    """Runs one script; created fresh for every run."""

    def __init__(self, host: Host):
        self.host = host
        self.current: Task | None = None  # the task being stepped, if any
        self._ready = deque()  # (task, value to send, exception to throw)
        # Handle -> the task waiting for that call. An awaitable blocks a task by adding it
        # here; the task is resumed with that call's completion, a (handle, reply, failure,
        # text) tuple (never None, so a resumed iterator can tell it from a start).
        self.blocked = {}
        self._groups = 0

    def run(self, coroutine: Coroutine) -> Any:
        """Drives `coroutine` and every task it spawns; returns its value or raises its error."""
        main = _Main(coroutine)
        self.spawn([main])
        ready = self._ready
        blocked = self.blocked
        while main.outcome is None:
            if ready:
                task, value, error = ready.popleft()
                self.current = task
                task.step(self, value, error)
                continue
            # Every task is blocked: the host's completions wake them, in its order, each
            # stepped at once rather than queued. The queue is empty, so whatever a step queues
            # runs after the whole batch, as it would have behind the batch's own entries. The
            # batch is checked first: a completion no task waits for is an error wherever in
            # the batch it is, before any task steps (a handle twice in one batch is found as
            # the second is reached).
            completions = self._wait_for_host()
            if len(completions) > 1:  # a lone completion is checked as it is taken
                for completion in completions:
                    if completion[0] not in blocked:
                        raise RuntimeError(f"the host completed an unknown call {completion[0]}")
            for completion in completions:
                task = blocked.pop(completion[0], None)
                if task is None:
                    raise RuntimeError(f"the host completed an unknown call {completion[0]}")
                self.current = task
                task.step(self, completion, None)
                if main.outcome is not None:
                    break
        self.current = None
        value, error = main.outcome
        if error is not None:
            raise error
        return value

    def spawn(self, tasks: list[Task]) -> None:
        """Queues new tasks, in order; each is first stepped with no value."""
        self._ready.append((_FirstSteps(tasks), None, None))

    def new_group(self) -> int:
        """Numbers a `parallel`/`pipeline` group, from 1 per run, in the order they start."""
        self._groups += 1
        return self._groups

    def resume(self, task: Task, value: Any = None, error: BaseException | None = None) -> None:
        """Queues a blocked task to continue with `value`, or with `error` raised at its await."""
        self._ready.append((task, value, error))

    def _wait_for_host(self) -> list:
        """The next batch of completions."""
        if not self.blocked:
            # Every task is blocked yet no call is pending: an SDK bug, never a script's.
            raise RuntimeError("flowbox scheduler deadlock: no task can run and no call is pending")
        try:
            return self.host.await_next()
        except CallFailed as failure:
            raise RuntimeError(
                f"the host could not deliver completions: {failure.message}"
            ) from None


def foreign_await_message(yielded: Any) -> str:
    return (
        f"flowbox cannot wait for this awaitable (it yielded {type(yielded).__name__} "
        f"{yielded!r:.80}); asyncio is not available in workflow scripts: await agent(), "
        "call_tool(), parallel() and pipeline(), and use parallel() to run things concurrently"
    )
