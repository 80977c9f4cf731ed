"""The runtime: runs scripts on the native engine, with leaves and tools written in Python."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import inspect
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Union

from . import _json, _native, errors
from ._tools import Tool
from ._types import Event, LeafReply, LeafRequest, Limits, Outcome, Summary, Usage

#: A leaf function: ``async def leaf(request: LeafRequest) -> str | LeafReply | Any`` (a plain
#: function runs in a worker thread), or an object with such a ``leaf`` method.
Leaf = Callable[[LeafRequest], Any]

#: The built-in backends by name: ``"fake"`` (offline, deterministic placeholders) and
#: ``"scripted:FILE"`` (replies from a scripted-backend JSON file).
Backend = Union[str, "Provider", Leaf, Any]


class Provider:
    """Leaf agents on a real chat model, with the API key from the environment
    (``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY``): :meth:`openai` (any OpenAI-compatible Chat
    Completions endpoint) or :meth:`anthropic` (the Messages API)."""

    def __init__(self, kind: str, model: str, base_url: str | None) -> None:
        self.kind = kind
        self.model = model
        self.base_url = base_url

    @classmethod
    def openai(cls, model: str, *, base_url: str | None = None) -> Provider:
        return cls("openai", model, base_url)

    @classmethod
    def anthropic(cls, model: str, *, base_url: str | None = None) -> Provider:
        return cls("anthropic", model, base_url)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "base_url": self.base_url}


class Runtime:
    """A flowbox runtime: build one per process and run scripts on it, from asyncio
    (``await rt.run(...)``) or from plain code (``rt.run_sync(...)``).

    ``backend`` answers the scripts' ``agent(...)`` calls: a Python leaf function (see
    :data:`Leaf`), a :class:`Provider`, ``"fake"`` or ``"scripted:FILE"``. ``tools`` are
    :class:`Tool`\\ s (``@flowbox.tool``). ``journal`` is the path of a SQLite journal that
    makes runs durable (``None`` keeps none); ``warm_pool`` keeps that many guests ready.

    Python leaves and tools run on the event loop the runs were started from, concurrently,
    as many at once as the run's ``max_concurrency``; the engine never holds the GIL. A
    runtime serves one event loop at a time.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        tools: Iterable[Tool] = (),
        limits: Limits | None = None,
        journal: str | os.PathLike[str] | None = None,
        warm_pool: int = 0,
        prices: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        tools = list(tools)
        for tool in tools:
            if not isinstance(tool, Tool):
                raise TypeError(f"tools are flowbox.Tool (use @flowbox.tool), not {tool!r}")
        names = [tool.name for tool in tools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"two tools are named {duplicates[0]!r}")
        if isinstance(warm_pool, bool) or not isinstance(warm_pool, int) or warm_pool < 0:
            raise ValueError(f"warm_pool is a count of instances, not {warm_pool!r}")
        backend_config, leaf = _backend_config(backend)
        self._dispatcher = _Dispatcher(leaf, {tool.name: tool for tool in tools})
        config = {
            "backend": backend_config,
            "tools": [tool.config() for tool in tools],
            "limits": limits.to_dict() if limits is not None else None,
            "journal": os.fspath(journal) if journal is not None else None,
            "warm_pool": warm_pool,
            "prices": os.fspath(prices) if prices is not None else None,
            "cache_dir": os.fspath(cache_dir) if cache_dir is not None else None,
        }
        self._journal = journal
        try:
            self._native = _native.Runtime(
                _json.dumps(config, "the configuration"), self._dispatcher
            )
        except ValueError as error:
            raise errors.SetupError(str(error), kind="host_failure") from None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active = 0
        self._sync_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        _OPEN.add(self)

    # Runs.

    async def run(
        self,
        script: str,
        args: Any = None,
        *,
        thread_id: str | None = None,
        limits: Limits | None = None,
    ) -> Outcome:
        """Runs ``script`` with ``args`` (any JSON value; ``None`` is ``{}``) and returns its
        :class:`Outcome`; a run error is the outcome's ``error``, not raised (``unwrap()``
        raises it). A new ``thread_id`` names the run in the journal; an existing one of a
        finished thread returns its recorded outcome without running."""
        request = self._request(script, args, thread_id, limits)
        return _outcome(
            await self._call(lambda done: _limits_checked(self._native.run, request, done))
        )

    async def resume(self, thread_id: str, *, limits: Limits | None = None) -> Outcome:
        """Resumes an interrupted journaled thread: finished leaves are answered from the
        journal (the leaf function is not called for them), the rest run. A runtime without
        a journal raises :class:`errors.JournalError`."""
        if self._journal is None:
            raise errors.JournalError(
                "resuming a thread needs a journal: build the Runtime with journal=PATH",
                kind="journal_failure",
            )
        text = _json.dumps(self._overlay(limits), "limits") if limits is not None else None
        return _outcome(
            await self._call(
                lambda done: _limits_checked(self._native.resume, thread_id, text, done)
            )
        )

    async def check(self, script: str) -> Any:
        """Checks ``script`` without running it (it parses, passes the guard, has an entry
        point); returns its ``meta`` (or ``None``), or raises :class:`errors.Rejected`."""
        _expect_str(script, "script")
        answer = await self._call(lambda done: self._native.check(script, done))
        return _unwrap(answer)["meta"]

    async def plan(self, script: str, args: Any = None, *, limits: Limits | None = None) -> Any:
        """What a run of ``script`` would do and cost, without running its leaves: the plan as
        JSON (``docs/plans.md``)."""
        request = self._request(script, args, None, limits)
        answer = await self._call(lambda done: _limits_checked(self._native.plan, request, done))
        return _unwrap(answer)["plan"]

    async def threads(self) -> list[dict[str, Any]]:
        """The journal's threads, newest first (empty without a journal)."""
        answer = _unwrap(await self._call(self._native.threads))
        if answer["damaged"]:
            raise errors.JournalError("; ".join(answer["damaged"]), kind="journal_failure")
        return answer["threads"]

    async def show(self, thread_id: str) -> dict[str, Any]:
        """One journaled thread: its header, name, status, journal entries and outcome."""
        _expect_str(thread_id, "thread_id")
        answer = await self._call(lambda done: self._native.show(thread_id, done))
        return _unwrap(answer)["thread"]

    # The same, for code without an event loop.

    def run_sync(self, script: str, args: Any = None, **options: Any) -> Outcome:
        """:meth:`run`, for synchronous code: a script, the REPL, a notebook cell (where it blocks
        the kernel's loop until the run ends; ``await rt.run(...)`` does not)."""
        return self._sync(self.run(script, args, **options))

    def resume_sync(self, thread_id: str, **options: Any) -> Outcome:
        """:meth:`resume`, for synchronous code."""
        return self._sync(self.resume(thread_id, **options))

    def check_sync(self, script: str) -> Any:
        """:meth:`check`, for synchronous code."""
        return self._sync(self.check(script))

    # Events.

    def events(self, *, lossless: bool = False) -> Events:
        """The events of every run on this runtime from now on, as an async iterator (call it
        in the event loop that reads it; ``close()`` it, or use ``async with``). A reader that
        falls behind gets a ``gap`` event counting what it missed, unless ``lossless``: then
        it gets everything, and scripts' ``log`` and ``phase`` wait while it is far behind."""
        return Events(self._native, asyncio.get_running_loop(), lossless)

    def subscribe(
        self, callback: Callable[[Event], None], *, lossless: bool = False
    ) -> Callable[[], None]:
        """Calls ``callback`` with every event from now on, from the engine's thread (keep it
        quick; an exception it raises is reported and ends the subscription). Returns the
        function that stops it."""

        def deliver(text: str) -> None:
            callback(Event.from_json(_json.loads(text)))

        return self._native.subscribe(lossless, deliver).cancel

    def close(self) -> None:
        """Stops the runtime: runs still in flight end as if the process had stopped (their
        journaled threads stay open to resume), and later calls raise. Called for every open
        runtime at interpreter exit; ``with flowbox.Runtime(...) as rt:`` calls it too."""
        if not self._closed:
            self._closed = True
            self._native.close(_CLOSE_TIMEOUT_SECS)
            if self._sync_loop is not None:
                self._sync_loop.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def guidance(self, *, patterns: bool = True) -> str:
        """The text that teaches a root model to write scripts for this runtime: the script
        contract, this runtime's limits, leaf options and tools, and (unless ``patterns`` is
        false) the pattern library. Append it to the model's own system prompt
        (``docs/orchestrator.md``)."""
        return self._native.guidance(patterns)

    @property
    def warm_pool(self) -> dict[str, int] | None:
        """The warm pool's state (``capacity``, ``ready``, ``memory_bytes``,
        ``prefaulted_bytes``, ``hits``, ``misses``), or ``None`` without a pool."""
        state = self._native.warm_pool()
        return _json.loads(state) if state is not None else None

    @property
    def guest_sha256(self) -> str:
        """The SHA-256 of the guest component this runtime runs."""
        return self._native.guest_sha256()

    @property
    def limits(self) -> Limits:
        """The runtime's default limits."""
        return Limits(**_json.loads(self._native.limits()))

    # The bridge to the native engine.

    def _request(self, script: Any, args: Any, thread_id: Any, limits: Limits | None) -> str:
        _expect_str(script, "script")
        if thread_id is not None:
            _expect_str(thread_id, "thread_id")
        request = {
            "script": script,
            "args": {} if args is None else args,
            "thread_id": thread_id,
            "limits": self._overlay(limits) if limits is not None else None,
        }
        try:
            _json.check(request["args"], "args")
            if limits is not None:
                _json.check(request["limits"], "limits")
        except _json.NotJson as error:
            raise errors.InvalidArgs(str(error), kind="invalid_args") from None
        return _json.dumps(request)

    def _overlay(self, limits: Limits) -> dict[str, Any]:
        """A run's limits: the runtime's, with the fields the run sets."""
        merged: dict[str, Any] = _json.loads(self._native.limits())
        merged.update(limits.to_dict())
        return merged

    async def _call(self, start: Callable[[Callable[[str], None]], Any]) -> dict[str, Any]:
        if self._closed:
            raise RuntimeError("this flowbox.Runtime is closed")
        loop = asyncio.get_running_loop()
        if self._active and self._loop is not loop:
            raise RuntimeError(
                "this flowbox.Runtime is serving runs on another event loop; a runtime serves "
                "one event loop at a time"
            )
        if self._dispatcher.loop is not loop:
            # Calls queued for, and answers pending on, a loop no longer running are served
            # here now.
            self._dispatcher.loop = loop
            if self._dispatcher.answers:
                self._dispatcher._flush()
            self._native.rearm()
        self._loop = loop
        self._active += 1
        future: asyncio.Future[str] = loop.create_future()

        def settle(text: str) -> None:
            if not future.done():
                future.set_result(text)

        def done(text: str) -> None:
            try:
                loop.call_soon_threadsafe(settle, text)
            except RuntimeError:
                pass  # The loop closed: nobody is waiting any more.

        try:
            handle = start(done)
            try:
                return _json.loads(await future)
            except asyncio.CancelledError:
                handle.cancel()
                raise
        finally:
            self._active -= 1

    def _sync(self, work: Any) -> Any:
        if self._closed:
            work.close()
            raise RuntimeError("this flowbox.Runtime is closed")
        if self._sync_loop is None or self._sync_loop.is_closed():
            self._sync_loop = asyncio.new_event_loop()
            weakref.finalize(self, self._sync_loop.close)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._sync_loop.run_until_complete(work)
        # A loop already runs in this thread (a notebook's kernel): the runtime's own loop runs
        # in a worker thread, and this one waits for it, as any synchronous call does.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as worker:
            return worker.submit(self._sync_loop.run_until_complete, work).result()


# How long closing a runtime waits for its threads to drop the work in flight.
_CLOSE_TIMEOUT_SECS = 10.0

# The runtimes not closed yet: closed at interpreter exit, before Python finalises, so that no
# thread of theirs calls into a finalising interpreter.
_OPEN: weakref.WeakSet[Runtime] = weakref.WeakSet()


@atexit.register
def _close_open_runtimes() -> None:
    for runtime in list(_OPEN):
        runtime.close()


class Events:
    """An async iterator of a runtime's events (:meth:`Runtime.events`)."""

    def __init__(self, native: Any, loop: asyncio.AbstractEventLoop, lossless: bool) -> None:
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()

        def deliver(text: str) -> None:
            event = Event.from_json(_json.loads(text))
            try:
                loop.call_soon_threadsafe(self._queue.put_nowait, event)
            except RuntimeError:
                self._handle.cancel()  # The loop closed.

        self._handle = native.subscribe(lossless, deliver)

    def close(self) -> None:
        """Stops the subscription: an iteration waiting for the next event ends."""
        self._handle.cancel()
        self._queue.put_nowait(None)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        event = await self._queue.get()
        if event is None:
            self._queue.put_nowait(None)
            raise StopAsyncIteration
        return event

    async def __aenter__(self) -> Events:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


class _Dispatcher:
    """Where the native engine's calls to Python leaves and tools arrive. The engine queues
    them on its bridge and wakes the dispatcher once per batch (from its own thread); on the
    event loop, the dispatcher takes the whole queue and starts each call as a task, or cancels
    the task of a call no longer waited for. The answers go back in batches too, once per turn
    of the loop."""

    def __init__(self, leaf: Callable[[LeafRequest], Any] | None, tools: dict[str, Tool]) -> None:
        self.leaf_function = leaf
        self.leaf_is_async = leaf is not None and _is_async(leaf)
        self.tools = {name: (tool, _is_async(tool.function)) for name, tool in tools.items()}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.answers: list[tuple[Any, str, str, bool]] = []
        self.bridge: Any = None

    def wake(self, bridge: Any) -> None:
        """Called from an engine thread: drain the bridge on the event loop soon."""
        loop = self.loop
        if loop is None or loop.is_closed():
            raise RuntimeError("no event loop is serving this runtime's runs")
        loop.call_soon_threadsafe(self._drain, bridge)

    def _drain(self, bridge: Any) -> None:
        loop = self.loop
        assert loop is not None
        for message in bridge.take():
            kind, call_id = message[0], message[1]
            if kind == "cancel":
                task = self.tasks.pop(call_id, None)
                if task is not None:
                    task.cancel()
                continue
            completion, fields = message[2], message[3]
            answer = self._answer_leaf if kind == "leaf" else self._answer_tool
            self.tasks[call_id] = loop.create_task(
                self._settle(call_id, answer, fields, completion, bridge)
            )

    async def _settle(
        self,
        call_id: int,
        answer: Callable[[Any], Awaitable[tuple[str, str]]],
        fields: Any,
        completion: Any,
        bridge: Any,
    ) -> None:
        try:
            kind, payload = await answer(fields)
        except asyncio.CancelledError:
            raise  # The run stopped waiting for this call.
        except _Refused as error:
            self._answer(bridge, completion, "error", str(error), False)
        except errors.LeafError as error:
            self._answer(bridge, completion, "error", str(error), error.retryable)
        except Exception as error:  # noqa: BLE001 - every failure becomes the call's error
            retryable = bool(getattr(error, "retryable", False))
            self._answer(bridge, completion, "error", f"{type(error).__name__}: {error}", retryable)
        else:
            self._answer(bridge, completion, kind, payload, False)
        finally:
            self.tasks.pop(call_id, None)

    def _answer(
        self, bridge: Any, completion: Any, kind: str, payload: str, retryable: bool
    ) -> None:
        if not self.answers:
            self.bridge = bridge
            assert self.loop is not None
            self.loop.call_soon(self._flush)
        self.answers.append((completion, kind, payload, retryable))

    def _flush(self) -> None:
        if not self.answers:
            return  # flushed already, when the runs moved to another loop
        answers, self.answers = self.answers, []
        # Held only from a drain to the flush of its answers: the bridge holds the dispatcher.
        bridge, self.bridge = self.bridge, None
        bridge.settle(answers)

    async def _answer_leaf(self, fields: tuple[Any, Any]) -> tuple[str, str]:
        (thread_id, call_id, key, prompt, prompt_is_json, schema), rest = fields
        agent_type, label, instruction, model, tools, instance_id, conversation = rest
        request = LeafRequest(
            thread_id=thread_id,
            call_id=call_id,
            idempotency_key=key,
            prompt=_json.loads(prompt) if prompt_is_json else prompt,
            schema=_json.loads(schema) if schema is not None else None,
            agent_type=agent_type,
            label=label,
            instruction=instruction,
            model=model,
            tools=tools,
            instance_id=instance_id,
            conversation=_json.loads(conversation) if conversation is not None else [],
        )
        assert self.leaf_function is not None
        reply = await _call_user(self.leaf_function, self.leaf_is_async, request)
        return _reply_payload(reply, request)

    async def _answer_tool(self, fields: tuple[str, str]) -> tuple[str, str]:
        name, arguments_text = fields
        tool, is_async = self.tools[name]
        arguments = _json.loads(arguments_text)
        result = await _call_user(tool.function, is_async, **arguments)
        try:
            return "json", _json.dumps(result, f"the result of tool {name}")
        except _json.NotJson as error:
            raise _Refused(str(error)) from None


class _Refused(Exception):
    """A Python answer that flowbox cannot take: its message says why."""


def _is_async(function: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)
    )


async def _call_user(
    function: Callable[..., Any], is_async: bool, *args: Any, **kwargs: Any
) -> Any:
    if is_async:
        return await function(*args, **kwargs)
    result = await asyncio.to_thread(function, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


def _reply_payload(reply: Any, request: LeafRequest) -> tuple[str, str]:
    """A leaf's reply as the bridge takes it: `("text", str)` for plain text, else `("json",
    '{"value", "usage"}')`."""
    if isinstance(reply, str) and request.schema is None:
        try:
            _json.check(reply, "the leaf's reply")
        except _json.NotJson as error:
            raise _Refused(str(error)) from None
        return "text", reply
    if not isinstance(reply, LeafReply):
        if request.schema is None:
            raise _Refused(
                "a leaf without a schema replies with text (a str or a LeafReply), not a "
                f"{type(reply).__name__}"
            )
        reply = LeafReply(reply)
    usage = reply.usage
    if usage is not None and not isinstance(usage, Usage):
        raise _Refused(f"a LeafReply's usage is a flowbox.Usage, not a {type(usage).__name__}")
    payload = {
        "value": reply.value,
        "usage": None
        if usage is None
        else {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
    }
    try:
        _json.check(payload["value"], "the leaf's reply")
    except _json.NotJson as error:
        raise _Refused(str(error)) from None
    return "json", _json.dumps(payload)


def _backend_config(backend: Any) -> tuple[dict[str, Any], Callable[[LeafRequest], Any] | None]:
    """How the native runtime is told about `backend`, and its leaf function when it is Python."""
    if isinstance(backend, Provider):
        return backend.config(), None
    if isinstance(backend, str):
        if backend == "fake":
            return {"kind": "fake"}, None
        if backend.startswith("scripted:"):
            return {"kind": "scripted", "path": backend.removeprefix("scripted:")}, None
        raise ValueError(
            f"unknown backend {backend!r}: use a leaf function, flowbox.Provider.openai(...), "
            "flowbox.Provider.anthropic(...), 'fake' or 'scripted:FILE'"
        )
    return {"kind": "python"}, _leaf_function(backend)


def _leaf_function(backend: Any) -> Callable[[LeafRequest], Any]:
    method = getattr(backend, "leaf", None)
    if callable(method):
        return method
    if callable(backend):
        return backend
    raise TypeError(
        f"a backend is a leaf function, an object with a leaf method, a flowbox.Provider, "
        f"'fake' or 'scripted:FILE', not {backend!r}"
    )


def _limits_checked(start: Callable[..., Any], *args: Any) -> Any:
    try:
        return start(*args)
    except _native.InvalidLimits as error:
        raise errors.InvalidLimits(str(error), kind="invalid_limits") from None


def _expect_str(value: Any, what: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{what} is a str, not a {type(value).__name__}")


def _outcome(answer: dict[str, Any]) -> Outcome:
    if "summary" not in answer:  # the run was stopped before it ended: there is no outcome
        raise errors.from_json(answer["error"])
    summary = Summary.from_json(answer["summary"])
    error = answer.get("error")
    return Outcome(
        result=answer.get("result"),
        error=errors.from_json(error, summary) if error else None,
        summary=summary,
        recorded=bool(answer.get("recorded", False)),
    )


def _unwrap(answer: dict[str, Any]) -> dict[str, Any]:
    if not answer["ok"]:
        raise errors.from_json(answer["error"])
    return answer
