"""The primitives a script calls: agent, call_tool, parallel, pipeline, phase, log, print and
budget. What they return is awaited by the script and driven by the scheduler. None of it is a
coroutine or generator, so no frame (and no path to globals) hangs off anything a script holds.
"""

import inspect
import types
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

from .host import AgentRequest, CallFailed, Host, Path, describe_error, exception_for
from .jsonvalue import NotJson, from_json, to_json
from .scheduler import PARK, Scheduler

# --- awaiting ------------------------------------------------------------------------------


class _Wait:
    """The iterator an SDK awaitable's `__await__` returns: a plain object, not a generator.

    The scheduler steps it through the awaiting coroutine: the first step (`send(None)`) starts
    the work and yields PARK; the step after the wake-up finishes the await.
    """

    __slots__ = ("_started",)

    def __init__(self):
        self._started = False

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def send(self, value):
        if not self._started:
            self._started = True
            return self._start()
        return self._finish(value)

    def throw(self, error, value=None, traceback=None):
        # The scheduler resumed the awaiting task with an error: raise it at the script's await.
        if value is None:
            value = error if isinstance(error, BaseException) else error()
        raise value.with_traceback(traceback) if traceback is not None else value


class _Awaitable:
    """Base of what the primitives return: awaitable once, started when first awaited."""

    __slots__ = ("_awaited",)
    _what = "call"

    def __init__(self):
        self._awaited = False

    def __await__(self):
        if self._awaited:
            raise RuntimeError(
                f"this {self._what} was already awaited; call {self._what} again to run it again"
            )
        self._awaited = True
        return self._wait()

    def __repr__(self) -> str:
        state = "awaited" if self._awaited else "not awaited yet"
        return f"<{self._what}: {state}>"


# --- agent and call_tool --------------------------------------------------------------------


class _LeafWait(_Wait):
    __slots__ = ("_scheduler", "_start_call")

    def __init__(self, scheduler: Scheduler, start_call: Callable[[Path], int]):
        super().__init__()
        self._scheduler = scheduler
        self._start_call = start_call

    def _start(self):
        try:
            handle = self._start_call(list(self._scheduler.current.path))
        except CallFailed as failure:
            raise exception_for(failure.kind, failure.message) from None
        self._scheduler.block_on(handle)
        return PARK

    def _finish(self, completion):
        if completion.ok:
            raise StopIteration(from_json(completion.payload))
        kind, message = completion.payload
        raise exception_for(kind, message)


class _LeafCall(_Awaitable):
    __slots__ = ("_scheduler", "_start_call")

    def __init__(self, scheduler: Scheduler, start_call: Callable[[Path], int]):
        super().__init__()
        self._scheduler = scheduler
        self._start_call = start_call

    def _wait(self):
        return _LeafWait(self._scheduler, self._start_call)


class AgentCall(_LeafCall):
    """What `agent(...)` returns."""

    __slots__ = ()
    _what = "agent(...)"


class ToolCall(_LeafCall):
    """What `call_tool(...)` returns."""

    __slots__ = ()
    _what = "call_tool(...)"


# --- parallel and pipeline ------------------------------------------------------------------


class _GroupWait(_Wait):
    """Starts one task per item under a new group and finishes when all of them have."""

    __slots__ = ("_group",)

    def __init__(self, group: "_Group"):
        super().__init__()
        self._group = group

    def _start(self):
        scheduler = self._group._scheduler
        parent = scheduler.current
        number = scheduler.new_group()
        bodies = self._group._bodies()
        if not bodies:
            raise StopIteration([])
        results = [None] * len(bodies)
        pending = [len(bodies)]
        fatal = []  # a BaseException that is not an Exception ends the group by propagating

        def finished(index, value, error):
            if error is None:
                results[index] = value
            elif not fatal:
                fatal.append(error)
            pending[0] -= 1
            if pending[0] == 0:
                if fatal:
                    scheduler.resume(parent, error=fatal[0])
                else:
                    scheduler.resume(parent, results)

        for index, body in enumerate(bodies):
            scheduler.spawn(
                body,
                parent.path + [(number, index)],
                lambda value, error, index=index: finished(index, value, error),
            )
        return PARK

    def _finish(self, results):
        raise StopIteration(results)


class _Group(_Awaitable):
    __slots__ = ("_scheduler", "_log")

    def __init__(self, scheduler: Scheduler, log: Callable[[str], None]):
        super().__init__()
        self._scheduler = scheduler
        self._log = log

    def _wait(self):
        return _GroupWait(self)


class Parallel(_Group):
    """What `parallel(items)` returns."""

    __slots__ = ("_items",)
    _what = "parallel(...)"

    def __init__(self, scheduler, log, items: list):
        super().__init__(scheduler, log)
        self._items = items  # (is_callable, item) pairs

    def _bodies(self):
        return [
            _run_branch(item, is_callable, index, self._log)
            for index, (is_callable, item) in enumerate(self._items)
        ]


class Pipeline(_Group):
    """What `pipeline(items, *stages)` returns."""

    __slots__ = ("_items", "_stages")
    _what = "pipeline(...)"

    def __init__(self, scheduler, log, items: list, stages: list):
        super().__init__(scheduler, log)
        self._items = items
        self._stages = stages  # (stage, arity) pairs

    def _bodies(self):
        return [
            _run_flow(item, index, self._stages, self._log)
            for index, item in enumerate(self._items)
        ]


# Task bodies. They are coroutines, but internal: the script only ever holds the Parallel or
# Pipeline object, never these.


async def _run_branch(item, is_callable: bool, index: int, log) -> Any:
    try:
        value = item() if is_callable else item
        if inspect.isawaitable(value):
            value = await value
        return value
    except Exception as error:
        log(f"parallel item {index} failed: {describe_error(error)}")
        return None


async def _run_flow(item, index: int, stages: list, log) -> Any:
    value = item
    for number, (stage, arity) in enumerate(stages, 1):
        try:
            value = stage(*(value, item, index)[:arity])
            if inspect.isawaitable(value):
                value = await value
        except Exception as error:
            log(
                f"pipeline item {index} failed in stage {number} ({_name_of(stage)}): "
                f"{describe_error(error)}"
            )
            return None
        if value is None:
            return None
    return value


def _stage_arity(stage, number: int) -> int:
    """How many of (prev, item, index) a stage takes, or a TypeError naming the stage."""
    if not callable(stage):
        raise TypeError(
            f"pipeline() stage {number} ({_a(stage)}) is not callable; a stage is a function "
            "called as stage(prev), stage(prev, item) or stage(prev, item, index)"
        )
    function, bound = stage, 0
    if isinstance(stage, types.MethodType):
        function, bound = stage.__func__, 1
    elif not isinstance(stage, (type, types.FunctionType)):
        function, bound = type(stage).__call__, 1  # an instance of a class defining __call__
    if not isinstance(function, types.FunctionType):
        return 1  # builtins, classes, partials: their arity cannot be read, so pass prev only
    code = function.__code__
    positional = code.co_argcount - bound
    required = max(code.co_argcount - len(function.__defaults__ or ()) - bound, 0)
    keyword_only = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    missing = [name for name in keyword_only if name not in (function.__kwdefaults__ or {})]
    takes_varargs = bool(code.co_flags & inspect.CO_VARARGS)
    calling = "a stage is called as stage(prev), stage(prev, item) or stage(prev, item, index)"
    name = _name_of(stage)
    if missing:
        raise TypeError(
            f"pipeline() stage {number} ({name}) requires the keyword-only argument "
            f"'{missing[0]}'; {calling}"
        )
    if required > 3:
        raise TypeError(
            f"pipeline() stage {number} ({name}) requires {required} positional arguments; "
            f"{calling}"
        )
    if takes_varargs:
        return 3
    if positional == 0:
        raise TypeError(f"pipeline() stage {number} ({name}) takes no arguments; {calling}")
    return min(positional, 3)


def _name_of(function) -> str:
    return getattr(function, "__name__", None) or type(function).__name__


def _a(value) -> str:
    return f"a {type(value).__name__}"


# --- budget -------------------------------------------------------------------------------


class Budget:
    """The script's `budget`: the run's token budget, read from the host on every use."""

    __slots__ = ("_host",)

    def __init__(self, host: Host):
        self._host = host

    @property
    def total(self) -> int | None:
        """The ceiling in tokens, or None when the run is unlimited."""
        return self._host.budget().total

    def spent(self) -> int:
        """Tokens used by the calls whose replies the script has received."""
        return self._host.budget().spent

    def remaining(self) -> int | None:
        """Tokens left (never negative), or None when the run is unlimited."""
        state = self._host.budget()
        if state.total is None:
            return None
        return max(state.total - state.spent, 0)

    def __repr__(self) -> str:
        state = self._host.budget()
        return f"<budget total={state.total} spent={state.spent}>"


# --- the primitives -------------------------------------------------------------------------


def make_primitives(host: Host, scheduler: Scheduler) -> dict:
    """The primitive functions and objects of one run, by the names scripts use."""

    def log(message) -> None:
        host.log(message if isinstance(message, str) else str(message))

    def print(*values, sep=" ", end="\n", flush=False) -> None:
        # One log line per call; the trailing newline print would write is implied by "line".
        text = (" " if sep is None else sep).join(str(value) for value in values)
        text += "\n" if end is None else end
        host.log(text[:-1] if text.endswith("\n") else text)

    def phase(title) -> None:
        if not isinstance(title, str):
            raise TypeError(f"phase() title must be a str, not {type(title).__name__}")
        host.phase(title)

    def agent(
        prompt,
        *,
        schema=None,
        agent_type=None,
        label=None,
        instruction=None,
        model=None,
        tools=None,
        instance_id=None,
    ) -> AgentCall:
        if isinstance(prompt, str):
            prompt_json = encode_basestring(prompt)  # to_json's own fast path, two calls sooner
        else:
            prompt_json = _json_argument("agent", prompt, "prompt")
        schema_json = None
        if schema is not None:
            if not isinstance(schema, dict):
                raise TypeError(
                    f"agent() schema must be a dict (a JSON Schema), not {type(schema).__name__}"
                )
            schema_json = _json_argument("agent", schema, "schema")
        options = (
            ("agent_type", agent_type),
            ("label", label),
            ("instruction", instruction),
            ("model", model),
            ("instance_id", instance_id),
        )
        for option, value in options:
            if value is not None and not isinstance(value, str):
                raise TypeError(f"agent() {option} must be a str, not {type(value).__name__}")
        if tools is not None:
            if not isinstance(tools, list) or not all(isinstance(tool, str) for tool in tools):
                raise TypeError("agent() tools must be a list of tool names (str)")
            tools = list(tools)

        def start(path: Path) -> int:
            request = AgentRequest(
                prompt_json, schema_json, agent_type, label, instruction, model, tools,
                instance_id, path,
            )  # fmt: skip
            return host.start_agent(request)

        return AgentCall(scheduler, start)

    def call_tool(name, /, **arguments) -> ToolCall:
        if not isinstance(name, str):
            raise TypeError(f"call_tool() name must be a str, not {type(name).__name__}")
        arguments_json = _json_argument("call_tool", arguments, "arguments")
        return ToolCall(scheduler, lambda path: host.start_tool(name, arguments_json, path))

    def parallel(items) -> Parallel:
        try:
            iterator = iter(items)
        except TypeError:
            raise TypeError(
                f"parallel() takes a list of functions or awaitables, not {type(items).__name__}"
            ) from None
        entries = []
        for index, item in enumerate(iterator):
            if inspect.isawaitable(item):
                entries.append((False, item))
            elif callable(item):
                entries.append((True, item))
            else:
                raise TypeError(
                    f"parallel() item {index} is {_a(item)}, not a function or an awaitable; "
                    "pass e.g. `lambda: agent(...)` or `agent(...)`"
                )
        return Parallel(scheduler, log, entries)

    def pipeline(items, *stages) -> Pipeline:
        try:
            iterator = iter(items)
        except TypeError:
            raise TypeError(
                f"pipeline() takes a list of items first, not {type(items).__name__}"
            ) from None
        items = list(iterator)
        checked = [(stage, _stage_arity(stage, number)) for number, stage in enumerate(stages, 1)]
        return Pipeline(scheduler, log, items, checked)

    primitives = {
        "agent": agent,
        "call_tool": call_tool,
        "parallel": parallel,
        "pipeline": pipeline,
        "phase": phase,
        "log": log,
        "print": print,
    }
    for name, function in primitives.items():
        function.__qualname__ = name  # so TypeErrors read `agent() got ...`
    primitives["budget"] = Budget(host)
    return primitives


def _json_argument(primitive: str, value, root: str) -> str:
    try:
        return to_json(value, root)
    except NotJson as error:
        raise TypeError(f"{primitive}() {error}") from None
