"""The entry points behind the WIT exports: `check` parses and checks a script; `run` also runs
it against a host and returns its result as JSON text; `plan_notes` lists what of it a plan's
placeholder replies decide, and has the plan's run that follows on the instance say which of its
leaves those replies led to. Every way a script can fail leaves here
as a `ScriptFailure` carrying the WIT error kind, a message and, when known, the script's line.
"""

import os
import random
import sys
from typing import Any, NamedTuple

from .errors import (
    INVALID_RESULT,
    OUT_OF_MEMORY,
    SCRIPT_EXCEPTIONS,
    SYNTAX,
    UNCAUGHT,
    ScriptFailure,
    exception_message,
)
from .dependence import reply_dependence
from .guard import check_script
from .host import DEFAULT_SETTINGS, Host, Settings
from .jsonvalue import NotJson, from_json, to_json
from .modules import full_builtins, safe_builtins
from .primitives import follow_placeholders, is_awaitable, make_primitives
from .scheduler import Scheduler
from .script import (
    MEMORY_ERRORS,
    RESULT,
    RETURNED,
    Entry,
    build,
    extract_meta,
    is_size_overflow,
    may_declare_scope,
    may_name_memory_error,
    may_use_random,
    memory_errors,
    parse,
    script_line,
)

# Globals every script gets besides the primitives: JSON spellings (models write them out of
# habit) and the exceptions failed calls raise, so `except BudgetExceeded:` needs no import.
_ALIASES = {"true": True, "false": False, "null": None}


class _Prepared(NamedTuple):
    entry: Entry
    meta: dict | None


class _Returned:
    """The script's RETURNED global: remembers the line of the entry function's latest `return`
    and passes its value through. It starts at the line of the entry's only `return`, when the
    entry has one and none of its returns is wrapped (see `Entry`)."""

    __slots__ = ("line",)

    def __init__(self, line: int | None):
        self.line = line

    def __call__(self, value, line):
        self.line = line
        return value


def check(source: str, guard: bool) -> str:
    """The script's meta as JSON text (`null` when it has none), after every static check."""
    return to_json(_prepare(source, guard).meta, "meta")


# The branches the placeholders decide, by `plan_notes` for the plan's run that follows.
_plan_branches: list | None = None


def plan_notes(host: Host, source: str, read_only_tools: list = ()) -> str:
    """The constructs whose path depends on a reply, as JSON text (see `dependence`;
    `read_only_tools` are the tools the plan calls for real). The run that follows on this
    instance (the plan's) tells the host which leaves start in their branches. Only parsing is
    checked: that run checks the rest."""
    global _plan_branches
    try:
        tree = parse(source)
    except (RecursionError, MemoryError):
        # Nesting too deep to parse: the run that follows says so with its line.
        return "[]"
    constructs = reply_dependence(tree, frozenset(read_only_tools))
    _plan_branches = [
        (first, last, construct.line)
        for construct in constructs
        for first, last in construct.branches
    ]
    return to_json([construct.note() for construct in constructs], "plan notes")


def run(host: Host, source: str, args_json: str, settings: Settings = DEFAULT_SETTINGS) -> str:
    """Runs the script with its JSON arguments; returns the result as JSON text."""
    global _plan_branches
    branches, _plan_branches = _plan_branches, None  # a plan's, when `plan_notes` came first
    if not settings.guard or may_use_random(source):
        # The host makes WASI randomness deterministic per run; seeding from it makes the
        # script's `random` replay exactly, whatever state the instance's set-up left it in.
        # A script that cannot reach the generator is spared the cost (~106 k fuel).
        random.seed(os.urandom(32))
    prepared = _prepare(source, settings.guard)
    try:
        # The usual arguments, none, without the decoder.
        args = {} if args_json == "{}" else from_json(args_json)
    except ValueError as error:
        raise ScriptFailure(
            UNCAUGHT, f"args are not valid JSON: {error}", None, "ValueError"
        ) from None
    host.started(None if prepared.meta is None else to_json(prepared.meta, "meta"))

    kit = _take_kit(host)
    _retained.append(kit)
    kit.returned.line = prepared.entry.return_line
    namespace = kit.namespace
    if not settings.guard:
        namespace["__builtins__"] = full_builtins(kit.print_function)
    namespace["args"] = args
    previous_limit = sys.getrecursionlimit()
    if branches:
        follow_placeholders(branches)
    try:
        sys.setrecursionlimit(settings.recursion_limit)
        entry = prepared.entry
        if entry.function is None:
            # A direct body that awaits evaluates to a coroutine of it, which the scheduler
            # drives; one that never awaits has run by now, and needs no scheduler at all.
            body = eval(entry.code, namespace)
            if body is not None:
                kit.scheduler.run(_await_body(body))
            result = namespace.get(RESULT)
        else:
            exec(entry.code, namespace)
            result = kit.scheduler.run(_call_entry(namespace[entry.function]))
    except BaseException as error:  # whatever the script did not catch ends the run
        raise _script_error(error) from None
    finally:
        sys.setrecursionlimit(previous_limit)
        if branches:
            follow_placeholders(None)
    _retained.append(result)
    return _result_json(result, kit.returned.line)


# What the runs on this instance made, kept until the instance is dropped. An instance serves
# one run (a plan's run after its notes), so freeing the run's globals, its scheduler and its
# result when `run` returns would only spend fuel (~31 k for a trivial run's kit alone) on
# memory nothing uses again. It also means no finaliser of the script's (a suspended
# coroutine's `finally`) runs after its result is made.
_retained: list = []


class _Kit(NamedTuple):
    """What a run needs that neither its script, its arguments nor its settings decide: the
    scheduler, the script's globals (the guarded builtins, the primitives; `args` still None),
    the primitives' `print` and the RETURNED recorder."""

    scheduler: Scheduler
    namespace: dict
    print_function: Any
    returned: _Returned


def _make_kit(host: Host) -> _Kit:
    scheduler = Scheduler(host)
    returned = _Returned(None)
    primitives = make_primitives(host, scheduler)
    print_function = primitives.pop("print")
    namespace = {
        "__builtins__": safe_builtins(print_function),
        # Read by `class` statements for the new class's __module__.
        "__name__": "workflow",
        **_ALIASES,
        **SCRIPT_EXCEPTIONS,
        MEMORY_ERRORS: memory_errors,
        RETURNED: returned,
        **primitives,
        "args": None,
    }
    return _Kit(scheduler, namespace, print_function, returned)


# The kit the next run takes, made ahead of it by `make_ready`.
_ready_kit: _Kit | None = None


def make_ready(host: Host) -> None:
    """Makes the next run's kit now. The guest calls this last before componentize-py
    snapshots it, so every instance starts with the kit made and its run spends no fuel on it:
    the same in every instance, pooled or not, so a replay's fuel stays the original's."""
    global _ready_kit
    _ready_kit = _make_kit(host)


def _take_kit(host: Host) -> _Kit:
    """The kit made ahead for `host`, once; a new one for any other run."""
    global _ready_kit
    kit, _ready_kit = _ready_kit, None
    if kit is None or kit.scheduler.host is not host:
        kit = _make_kit(host)
    return kit


def _prepare(source: str, guard: bool) -> _Prepared:
    """Parses, checks and compiles; nothing of the script runs."""
    try:
        tree = parse(source)
        meta = extract_meta(tree)
        if guard:
            check_script(tree)
        entry = build(tree, may_name_memory_error(source), may_declare_scope(source))
        return _Prepared(entry, meta)
    except (RecursionError, MemoryError) as error:
        # Deeply nested source exhausts the parser's stack (MemoryError) or the recursion of
        # the compiler or the guard (RecursionError) long before memory really runs out.
        detail = exception_message(error) or type(error).__name__
        raise ScriptFailure(
            SYNTAX, f"the script is nested too deeply to compile ({detail})"
        ) from None


async def _await_body(body) -> None:
    """Awaits a direct body compiled as the module (see `script.build`), which assigns its
    result to RESULT."""
    await body


async def _call_entry(entry) -> Any:
    """Calls main()/run() or the wrapped body; a sync main() may return an awaitable."""
    result = entry()
    if is_awaitable(result):
        result = await result
    return result


def _script_error(error: BaseException) -> ScriptFailure:
    line = script_line(error)
    message = exception_message(error)
    if isinstance(error, MemoryError):
        return ScriptFailure(
            OUT_OF_MEMORY,
            f"the script ran out of memory{': ' + message if message else ''}",
            line,
            type(error).__name__,
        )
    if is_size_overflow(error):
        return ScriptFailure(
            OUT_OF_MEMORY,
            "the script ran out of memory: it asked for an object larger than the guest's "
            "2 GiB address space",
            line,
            "MemoryError",
        )
    return ScriptFailure(UNCAUGHT, message, line, type(error).__name__)


def _result_json(result: Any, line: int | None) -> str:
    """The result as JSON text that can cross the boundary; `line` is that of the `return`
    that produced it."""
    try:
        text = to_json(result, "result")
    except NotJson as error:
        raise ScriptFailure(INVALID_RESULT, str(error), line) from None
    except MemoryError:
        raise ScriptFailure(
            OUT_OF_MEMORY, "the result is too large to write as JSON", line, "MemoryError"
        ) from None
    # Python strings may hold lone surrogates ("\ud800"), which are not text; `isascii` is
    # O(1), so the common case costs nothing.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ScriptFailure(
                INVALID_RESULT,
                f"the result contains {text[error.start]!r} at position {error.start}, a lone "
                "surrogate that is not valid text",
                line,
            ) from None
    return text
