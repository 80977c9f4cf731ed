"""The deterministic coroutine scheduler: a FIFO ready queue of tasks, one `await_next()` call
whenever every task is blocked, and wake-ups in the order the host delivers completions. Given
the same completions, a run takes exactly the same steps, which is what makes replay exact.
"""

from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from .host import CallFailed, Host, Path

# What the SDK's awaitables yield to say "this task is blocked; I arranged its wake-up".
# Anything else reaching the scheduler came from an awaitable flowbox does not know.
PARK = object()


class Task:
    """One coroutine being driven, with its place in the script's tree of groups."""

    __slots__ = ("coroutine", "path", "on_done")

    def __init__(self, coroutine: Coroutine, path: Path, on_done: Callable):
        self.coroutine = coroutine
        self.path = path
        # Called once with (value, None) or (None, exception) when the coroutine finishes.
        self.on_done = on_done


class Scheduler:
    """Runs one script; created fresh for every run."""

    def __init__(self, host: Host):
        self.host = host
        self.current: Task | None = None  # the task being stepped, if any
        self._ready = deque()  # (task, value to send, exception to throw)
        self._blocked = {}  # handle -> the task waiting for that call
        self._groups = 0

    def run(self, coroutine: Coroutine) -> Any:
        """Drives `coroutine` and every task it spawns; returns its value or raises its error."""
        outcome = []
        self.spawn(coroutine, [], lambda value, error: outcome.append((value, error)))
        while not outcome:
            if not self._ready:
                self._wait_for_host()
            task, value, error = self._ready.popleft()
            self._step(task, value, error)
        value, error = outcome[0]
        if error is not None:
            raise error
        return value

    def spawn(self, coroutine: Coroutine, path: Path, on_done: Callable) -> None:
        self._ready.append((Task(coroutine, path, on_done), None, None))

    def new_group(self) -> int:
        """Numbers a `parallel`/`pipeline` group, from 1 per run, in the order they start."""
        self._groups += 1
        return self._groups

    def block_on(self, handle: int) -> None:
        """Blocks the current task until the host completes `handle`; the task is resumed with
        that call's `Completion` (never None, so a resumed iterator can tell it from a start)."""
        self._blocked[handle] = self.current

    def resume(self, task: Task, value: Any = None, error: BaseException | None = None) -> None:
        """Queues a blocked task to continue with `value`, or with `error` raised at its await."""
        self._ready.append((task, value, error))

    def _wait_for_host(self) -> None:
        if not self._blocked:
            # Every task is blocked yet no call is pending: an SDK bug, never a script's.
            raise RuntimeError("flowbox scheduler deadlock: no task can run and no call is pending")
        try:
            completions = self.host.await_next()
        except CallFailed as failure:
            raise RuntimeError(
                f"the host could not deliver completions: {failure.message}"
            ) from None
        for completion in completions:
            task = self._blocked.pop(completion.handle, None)
            if task is None:
                raise RuntimeError(f"the host completed an unknown call {completion.handle}")
            self.resume(task, completion)

    def _step(self, task: Task, value: Any, error: BaseException | None) -> None:
        self.current = task
        try:
            if error is not None:
                yielded = task.coroutine.throw(error)
            else:
                yielded = task.coroutine.send(value)
        except StopIteration as stop:
            task.on_done(stop.value, None)
        except BaseException as failure:  # the task's own error, reported to whoever awaits it
            task.on_done(None, failure)
        else:
            if yielded is not PARK:
                self.resume(task, error=TypeError(_foreign_await_message(yielded)))
        finally:
            self.current = None


def _foreign_await_message(yielded: Any) -> str:
    return (
        f"flowbox cannot wait for this awaitable (it yielded {type(yielded).__name__} "
        f"{yielded!r:.80}); asyncio is not available in workflow scripts: await agent(), "
        "call_tool(), parallel() and pipeline(), and use parallel() to run things concurrently"
    )
