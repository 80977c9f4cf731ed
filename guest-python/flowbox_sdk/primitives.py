"""The primitives a script calls: agent, call_tool, parallel, pipeline, phase, log, print and
budget. What they return is awaited by the script and driven by the scheduler. None of it is a
coroutine or generator, so no frame (and no path to globals) hangs off anything a script holds.
"""

import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

from .errors import CallFailed, describe_error, exception_for, exception_message
from .host import PARALLEL, PIPELINE, AgentOptions, BranchFailure, Host, Path
from .jsonvalue import NotJson, encode_basestring, from_json, to_json
from .scheduler import PARK, CoroutineTask, Scheduler, Task, foreign_await_message
from .script import FILENAME, caller_line, function_line, script_line

# --- awaiting ------------------------------------------------------------------------------


class _Wait:
    """Base of the iterators SDK awaitables' `__await__` return: plain objects, not generators.

    The scheduler steps one through the awaiting coroutine: the first step (`next`, as an
    `await` takes it, or `send(None)`) starts the work and yields PARK; the step after the
    wake-up finishes the await.
    """

    __slots__ = ("_started",)

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def throw(self, error, value=None, traceback=None):
        # The scheduler resumed the awaiting task with an error: raise it at the script's await.
        if value is None:
            value = error if isinstance(error, BaseException) else error()
        raise value.with_traceback(traceback) if traceback is not None else value


class _Awaitable:
    """Base of what the primitives return: awaitable once, started when first awaited."""

    __slots__ = ("_awaited",)
    _what = "call"

    def __await__(self):
        self._claim()
        return self._wait()

    def _claim(self) -> None:
        """Marks this awaited; awaiting it again is the script's error."""
        if self._awaited:
            raise RuntimeError(
                f"this {self._what} was already awaited; call {self._what} again to run it again"
            )
        self._awaited = True

    def __repr__(self) -> str:
        state = "awaited" if self._awaited else "not awaited yet"
        return f"<{self._what}: {state}>"


# --- a plan's placeholder path ---------------------------------------------------------------


class _Placeholders:
    """In a plan's run: which branches of reply-dependent constructs hold each leaf it starts,
    so the plan can say which of its leaves the placeholder replies led to. A call is in a
    branch when a script frame on the stack is on one of its lines, or the group it belongs
    to was awaited in one."""

    __slots__ = ("_branches", "_groups")

    def __init__(self, branches: list):
        self._branches = branches  # (first line, last line, the construct's line)
        self._groups = {}  # group number -> the constructs holding the await of the group

    def holding(self, path: Path) -> set:
        """The lines of the constructs whose branches hold the current call, under `path`."""
        constructs = set()
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == FILENAME:
                line = frame.f_lineno
                for first, last, construct in self._branches:
                    if first <= line <= last:
                        constructs.add(construct)
            frame = frame.f_back
        for position in path:
            constructs |= self._groups.get(position[0], set())
        return constructs

    def group(self, number: int, path: Path) -> None:
        """Group `number` is being awaited under `path`: its calls inherit the branches."""
        self._groups[number] = self.holding(path)


# Set for a plan's run only (see `follow_placeholders`).
_placeholders: _Placeholders | None = None


def follow_placeholders(branches: list | None) -> None:
    """Marks the coming run a plan's, whose placeholders decide `branches` ((first line, last
    line, construct line) triples); None: a run's, which marks nothing."""
    global _placeholders
    _placeholders = None if branches is None else _Placeholders(branches)


# --- agent and call_tool --------------------------------------------------------------------


class _LeafCall(_Awaitable):
    """A call the host runs: started by `_start` when first awaited, finished by its completion."""

    __slots__ = ("_scheduler",)

    def __await__(self):
        # Claimed by `_start`, in the await's first step, rather than here: each of the three
        # ways a leaf is awaited (an `await`, a parallel branch, a pipeline stage) would
        # otherwise write the claim out, for the Python call it saves (~1.5 k fuel a leaf).
        return _LeafWait(self)

    def _start(self, path: Path) -> int:
        """Claims the call (awaiting it twice is the script's error) and starts it on the
        host; returns its handle or raises what the script sees."""
        raise NotImplementedError


class _LeafWait(_Wait):
    __slots__ = ("_call",)

    def __init__(self, call: _LeafCall):
        self._started = False
        self._call = call

    def send(self, completion):
        if not self._started:
            return self.__next__()
        # The completion's result written out (see `_Branch.step`).
        if completion[2] is not None:
            raise exception_for(completion[2])
        raise StopIteration(completion[1] if completion[3] else from_json(completion[1]))

    def __next__(self):
        # The first step, which an `await` takes by `next` (not `send(None)`, a Python call
        # more): starts the call and parks the awaiting task.
        if self._started:
            return self.send(None)
        self._started = True
        call = self._call
        scheduler = call._scheduler
        current = scheduler.current
        scheduler.blocked[call._start(current.path)] = current
        return PARK


class AgentCall(_LeafCall):
    """What `agent(...)` returns."""

    __slots__ = ("_prompt", "_options")
    _what = "agent(...)"

    def __init__(self, scheduler: Scheduler, prompt: str, options: AgentOptions | None):
        self._awaited = False
        self._scheduler = scheduler
        self._prompt = prompt  # as JSON text
        self._options = options  # None when the call set none

    def _start(self, path):
        if self._awaited:
            self._claim()  # raises: awaited twice
        self._awaited = True
        host = self._scheduler.host
        try:
            handle = host.start_agent(self._prompt, self._options, path)
        except CallFailed as failure:
            raise exception_for(failure) from None
        if _placeholders is not None:
            constructs = _placeholders.holding(path)
            if constructs:
                host.placeholder_path(handle, sorted(constructs))
        return handle


class ToolCall(_LeafCall):
    """What `call_tool(...)` returns."""

    __slots__ = ("_name", "_arguments_json")
    _what = "call_tool(...)"

    def __init__(self, scheduler: Scheduler, name: str, arguments_json: str):
        self._awaited = False
        self._scheduler = scheduler
        self._name = name
        self._arguments_json = arguments_json

    def _start(self, path):
        if self._awaited:
            self._claim()  # raises: awaited twice
        self._awaited = True
        try:
            return self._scheduler.host.start_tool(self._name, self._arguments_json, path)
        except CallFailed as failure:
            raise exception_for(failure) from None


# --- parallel and pipeline ------------------------------------------------------------------


class _GroupWait(_Wait):
    """Starts one task per item under a new group, gathers their results in input order and
    finishes when all of them have."""

    __slots__ = ("_group", "_parent", "_results", "_pending", "_fatal")

    def __init__(self, group: "_Group"):
        self._started = False
        self._group = group
        # A BaseException that is not an Exception ends the group by propagating.
        self._fatal = None

    def send(self, results):
        if self._started:
            raise StopIteration(results)
        self._started = True
        scheduler = self._group._scheduler
        parent = self._parent = scheduler.current
        number = scheduler.new_group()
        if _placeholders is not None:
            _placeholders.group(number, parent.path)
        tasks = self._group._tasks(self, parent.path, number)
        if not tasks:
            raise StopIteration([])
        self._results = [None] * len(tasks)
        self._pending = len(tasks)
        scheduler.spawn(tasks)
        return PARK

    def done(self, index: int, value: Any, error: BaseException | None) -> None:
        """Records item `index`; the last one resumes the task that awaits the group."""
        if error is None:
            self._results[index] = value
        elif self._fatal is None:
            self._fatal = error
        self._pending -= 1
        if self._pending == 0:
            self.resume_parent()

    def resume_parent(self) -> None:
        """Every item is done: resumes the task that awaits the group."""
        scheduler = self._group._scheduler
        if self._fatal is not None:
            scheduler.resume(self._parent, error=self._fatal)
        else:
            scheduler.resume(self._parent, self._results)


class _Group(_Awaitable):
    __slots__ = ("_scheduler", "_log", "_host", "_line")

    def __init__(self, scheduler: Scheduler, log: Callable[[str], None], line: int | None):
        self._awaited = False
        self._scheduler = scheduler
        self._log = log
        self._host = scheduler.host
        self._line = line  # of the parallel(...) or pipeline(...) call

    def _wait(self):
        return _GroupWait(self)

    def _failed(self, index: int, stage, function, error: Exception, what: str) -> None:
        """Reports a branch that raised and became None: a log line for people (`what`, then
        the error), and the failure for the summary, at the line it was raised at (else the
        line of the branch's function, else of the group's call)."""
        self._log(f"{what}: {describe_error(error)}")
        line = script_line(error) or function_line(function) or self._line
        group = PIPELINE if stage is not None else PARALLEL
        self._host.branch_failed(
            BranchFailure(group, index, stage, type(error).__name__, exception_message(error), line)
        )


class Parallel(_Group):
    """What `parallel(items)` returns."""

    __slots__ = ("_items",)
    _what = "parallel(...)"

    def __init__(self, scheduler, log, line, items: list):
        super().__init__(scheduler, log, line)
        self._items = items  # (is_callable, item) pairs

    def _tasks(self, gather, path, number):
        return [
            _Branch(
                gather, index, item, is_callable, path + [(number, index, size, None)]
            )
            for size in (len(self._items),)
            for index, (is_callable, item) in enumerate(self._items)
        ]


class Pipeline(_Group):
    """What `pipeline(items, *stages)` returns."""

    __slots__ = ("_items", "_stages")
    _what = "pipeline(...)"

    def __init__(self, scheduler, log, line, items: list, stages: list):
        super().__init__(scheduler, log, line)
        self._items = items
        self._stages = stages  # (stage, arity) pairs

    def _tasks(self, gather, path, number):
        size = len(self._items)
        flows = []
        for index, item in enumerate(self._items):
            flows.append(_Flow(gather, self, index, item, path, (number, index, size)))
        return flows


# The tasks of a group. Internal: the script only ever holds the Parallel or Pipeline object.


class _Branch(CoroutineTask):
    """One parallel item: calls it (when callable) and awaits what it gets. An agent or tool
    call is driven directly, without a coroutine around it, and a coroutine no one awaits yet
    (an async function's) is stepped by the branch itself; any other awaitable is awaited by a
    coroutine of its own. A failure becomes None, reported to the host and logged."""

    __slots__ = ("_gather", "_index", "_item", "_is_callable")

    def __init__(self, gather: _GroupWait, index: int, item, is_callable: bool, path: Path):
        self.path = path
        self.coroutine = None
        self._gather = gather
        self._index = index
        self._item = item
        self._is_callable = is_callable

    def step(self, scheduler, value, error):
        if self.coroutine is not None:
            CoroutineTask.step(self, scheduler, value, error)
            return
        # The completion's result and `_claim` written out: a fan-out takes these steps for
        # every leaf, and each call saved is ~1.5 k fuel of the ~60 k a leaf costs.
        try:
            if value is not None:  # the completion of the call it waits for
                if value[2] is not None:
                    raise exception_for(value[2])
                value = value[1] if value[3] else from_json(value[1])
            else:
                value = self._item() if self._is_callable else self._item
                kind = type(value)
                if kind is AgentCall or kind is ToolCall:
                    scheduler.blocked[value._start(self.path)] = self
                    return
                if kind is types.CoroutineType and not value.cr_suspended:
                    # A coroutine no one awaits yet: stepped as an `await` would. (One that
                    # is suspended is awaited elsewhere, and awaiting it, below, says so.)
                    self.coroutine = value
                    CoroutineTask.step(self, scheduler, None, None)
                    return
                if is_awaitable(value):
                    self.coroutine = _awaiting(value)
                    CoroutineTask.step(self, scheduler, None, None)
                    return
        except BaseException as failure:
            self.finish(None, failure)
        else:
            # `_GroupWait.done` for a value, written out.
            gather = self._gather
            gather._results[self._index] = value
            gather._pending -= 1
            if gather._pending == 0:
                gather.resume_parent()

    def finish(self, value, error):
        if isinstance(error, Exception):
            # Reporting may fail in turn (a script's callable whose name cannot be read): that
            # error is the group's, raised where the group is awaited, not the whole run's.
            try:
                value, error = self.failed(error), None
            except BaseException as reporting:
                value, error = None, reporting
        self._gather.done(self._index, value, error)

    def failed(self, error: Exception) -> None:
        self._gather._group._failed(
            self._index,
            None,
            self._item if self._is_callable else None,  # for the line of a failure
            error,
            f"parallel item {self._index} failed",
        )


class _Flow(Task):
    """One pipeline item, taken through the stages in turn. As a parallel branch's, a stage's
    agent or tool call is started here and its completion taken here, without a coroutine
    around it, and an async stage's coroutine is stepped by the item itself (`coroutine`); any
    other awaitable a stage returns is awaited by a coroutine of its own. The item goes on to
    the next stage with the result. A stage that raises, or whose call fails, makes the item
    None, reported and logged. The path's last position names the stage the item is in, so the
    calls of each stage say which one they belong to."""

    __slots__ = ("coroutine", "_gather", "_group", "_index", "_item", "_outer", "_position",
                 "_stage")  # fmt: skip

    def __init__(self, gather: _GroupWait, group: Pipeline, index: int, item, outer: Path,
                 position: tuple):  # fmt: skip
        self.path = outer + [position + (1,)]
        self.coroutine = None
        self._gather = gather
        self._group = group
        self._index = index
        self._item = item
        self._outer = outer  # the path of the task that awaits the pipeline
        self._position = position  # (group, index, size), without the stage
        self._stage = 0  # the stage the item is in, from 1; 0 before the first

    def step(self, scheduler, value, error):
        stages = self._group._stages
        number = self._stage
        try:
            if self.coroutine is None:
                if value is not None:  # the completion of the stage's call, written out
                    if value[2] is not None:
                        raise exception_for(value[2])
                    value = value[1] if value[3] else from_json(value[1])
                else:  # the first step: the item goes into the first stage
                    value = self._item
            # Each turn: the coroutine awaiting what the stage returned is stepped, if any;
            # then `value` is the stage's result (the item before the first), which the next
            # stage is called with. Every item takes each step once per stage, so the stage is
            # called without building its arguments and the awaitable test is written out
            # (each Python call, and each tuple, costs the guest ~1.5 k fuel).
            while True:
                coroutine = self.coroutine
                if coroutine is not None:
                    try:
                        if error is not None:
                            yielded = coroutine.throw(error)
                        else:
                            yielded = coroutine.send(value)
                    except StopIteration as stop:
                        value = stop.value
                        self.coroutine = error = None
                    else:
                        if yielded is not PARK:
                            scheduler.resume(self, error=TypeError(foreign_await_message(yielded)))
                        return
                if number == len(stages) or (number and value is None):
                    break
                number += 1
                self._stage = number
                if number > 1:
                    # Into the next stage: a new path, as calls already made hold the old one.
                    self.path = self._outer + [self._position + (number,)]
                stage, arity = stages[number - 1]
                if arity == 1:
                    value = stage(value)
                elif arity == 2:
                    value = stage(value, self._item)
                else:
                    value = stage(value, self._item, self._index)
                kind = type(value)
                if kind is AgentCall or kind is ToolCall:
                    scheduler.blocked[value._start(self.path)] = self
                    return
                if kind is types.CoroutineType and not value.cr_suspended:
                    # An async stage's coroutine: stepped as an `await` would (as a branch's).
                    self.coroutine, value = value, None
                elif kind in _AWAITABLE_TYPES or (
                    kind not in _PLAIN_TYPES and inspect.isawaitable(value)
                ):
                    self.coroutine, value = _awaiting(value), None
        except Exception as failure:
            number = self._stage
            stage = stages[number - 1][0]
            try:
                what = f"pipeline item {self._index} failed in stage {number} ({_name_of(stage)})"
                self._group._failed(self._index, number, stage, failure, what)
            except BaseException as reporting:  # as for a parallel branch (`_Branch.finish`)
                self._gather.done(self._index, None, reporting)
            else:
                self._gather.done(self._index, None, None)
        except BaseException as failure:  # not the item's to swallow: it ends the group
            self._gather.done(self._index, None, failure)
        else:
            self._gather.done(self._index, value, None)


async def _awaiting(awaitable) -> Any:
    """Awaits any other awaitable a branch or a stage returned, for the task to step."""
    return await awaitable


# Exact types whose `inspect.isawaitable` answer is fixed, so the common cases skip its checks.
_AWAITABLE_TYPES = frozenset({types.CoroutineType, AgentCall, ToolCall, Parallel, Pipeline})
_PLAIN_TYPES = frozenset(
    {type(None), bool, int, float, str, list, dict, tuple, types.FunctionType}
)


def is_awaitable(value) -> bool:
    """`inspect.isawaitable(value)`."""
    kind = type(value)
    if kind in _AWAITABLE_TYPES:
        return True
    if kind in _PLAIN_TYPES:
        return False
    return inspect.isawaitable(value)


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
    """The script's `budget`: the run's token and dollar budgets, read from the host on every
    use."""

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

    @property
    def total_usd(self) -> float | None:
        """The ceiling in dollars, or None when the run has none."""
        return self._host.budget().total_usd

    def spent_usd(self) -> float | None:
        """Dollars spent by the leaves whose replies the script has received, at the host's
        prices; None when the host prices no leaves."""
        return self._host.budget().spent_usd

    def remaining_usd(self) -> float | None:
        """Dollars left (never negative), or None without a dollar ceiling."""
        state = self._host.budget()
        if state.total_usd is None:
            return None
        # Host dollars are exact to the pico-dollar; so is the difference, once rounded.
        return max(round(state.total_usd - (state.spent_usd or 0.0), 12), 0.0)

    def __repr__(self) -> str:
        state = self._host.budget()
        return (
            f"<budget total={state.total} spent={state.spent} total_usd={state.total_usd} "
            f"spent_usd={state.spent_usd}>"
        )


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

    def agent(prompt, **options) -> AgentCall:
        if isinstance(prompt, str):
            prompt_json = encode_basestring(prompt)  # to_json's own fast path, two calls sooner
        else:
            prompt_json = _json_argument("agent", prompt, "prompt")
        # The usual call sets no option: one test rather than one per option (each bytecode
        # costs the guest hundreds of fuel, and a fan-out makes this call for every leaf).
        if not options:
            return AgentCall(scheduler, prompt_json, None)
        return with_options(prompt_json, **options)

    def with_options(
        prompt,  # as JSON text; named as `agent`'s, whose signature this is
        *,
        schema=None,
        agent_type=None,
        label=None,
        instruction=None,
        model=None,
        tools=None,
        instance_id=None,
    ) -> AgentCall:
        if (
            schema is None
            and agent_type is None
            and label is None
            and instruction is None
            and model is None
            and tools is None
            and instance_id is None
        ):
            return AgentCall(scheduler, prompt, None)
        schema_json = None
        if schema is not None:
            if not isinstance(schema, dict):
                raise TypeError(
                    f"agent() schema must be a dict (a JSON Schema), not {type(schema).__name__}"
                )
            schema_json = _json_argument("agent", schema, "schema")
        text_options = (
            ("agent_type", agent_type),
            ("label", label),
            ("instruction", instruction),
            ("model", model),
            ("instance_id", instance_id),
        )
        for option, value in text_options:
            if value is not None and not isinstance(value, str):
                raise TypeError(f"agent() {option} must be a str, not {type(value).__name__}")
        if tools is not None:
            if not isinstance(tools, list) or not all(isinstance(tool, str) for tool in tools):
                raise TypeError("agent() tools must be a list of tool names (str)")
            tools = list(tools)
        options = AgentOptions(schema_json, agent_type, label, instruction, model, tools,
                               instance_id)  # fmt: skip
        return AgentCall(scheduler, prompt, options)

    # As scripts see it: an unknown option's error names `agent()`, and `agent`'s signature
    # (`inspect.signature` follows `__wrapped__`) is the contract's, the prompt then the
    # options. Nothing is computed here: the snapshot that holds it would make every run dearer.
    with_options.__qualname__ = "agent"
    agent.__wrapped__ = with_options

    def call_tool(name, /, **kwargs) -> ToolCall:
        if not isinstance(name, str):
            raise TypeError(f"call_tool() name must be a str, not {type(name).__name__}")
        arguments_json = _json_argument("call_tool", kwargs, "arguments")
        return ToolCall(scheduler, name, arguments_json)

    def parallel(items) -> Parallel:
        try:
            iterator = iter(items)
        except TypeError:
            raise TypeError(
                f"parallel() takes a list of functions or awaitables, not {type(items).__name__}"
            ) from None
        entries = []
        for index, item in enumerate(iterator):
            if type(item) is types.FunctionType:  # the usual lambda, never awaitable
                entries.append((True, item))
            elif is_awaitable(item):
                entries.append((False, item))
            elif callable(item):
                entries.append((True, item))
            else:
                raise TypeError(
                    f"parallel() item {index} is {_a(item)}, not a function or an awaitable; "
                    "pass e.g. `lambda: agent(...)` or `agent(...)`"
                )
        return Parallel(scheduler, log, caller_line(), entries)

    def pipeline(items, *stages) -> Pipeline:
        try:
            iterator = iter(items)
        except TypeError:
            raise TypeError(
                f"pipeline() takes a list of items first, not {type(items).__name__}"
            ) from None
        items = list(iterator)
        checked = [(stage, _stage_arity(stage, number)) for number, stage in enumerate(stages, 1)]
        return Pipeline(scheduler, log, caller_line(), items, checked)

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
