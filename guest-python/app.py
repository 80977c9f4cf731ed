"""The flowbox guest's WIT export: adapts the generated bindings (`wit_world`) to the SDK's host
protocol and hands `run`/`check` to the SDK. componentize-py runs this module at build time and
snapshots the interpreter, so whatever it imports is all that exists at run time.
"""

# Importing flowbox_sdk reads the script contract and preloads the standard library scripts may
# use: `flowbox_sdk.modules` imports every module the contract allows and the helpers they
# import lazily.
import gc
import random
import time

import wit_world
from componentize_py_types import Err
from wit_world.imports import host as wit

import flowbox_sdk
from flowbox_sdk import BudgetState, CallFailed, ScriptFailure, Settings
from flowbox_sdk import immortal, warmup


def _kind_name(kind) -> str:
    """A WIT enum case as the SDK spells it: ErrorKind.AGENT_FAILED -> "agent-failed"."""
    return kind.name.lower().replace("_", "-")


def _failure(error) -> CallFailed:
    """A WIT `call-error` as the SDK's CallFailed."""
    return CallFailed(_kind_name(error.kind), error.message, error.retryable, error.cause)


def _call_failed(error: Err) -> CallFailed:
    return _failure(error.value)


def _text(value, what: str):
    """`value` unchanged if it can cross the boundary as UTF-8. Python strings may hold lone
    surrogates ("\\ud800"), which are not text; lowering one would crash the guest, so the
    script gets a ValueError instead (`isascii` is O(1), so the common case costs nothing)."""
    if value is None or value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise CallFailed(
            "invalid-request",
            f"{what} contains {value[error.start]!r} at position {error.start}, a lone "
            "surrogate that is not valid text",
        ) from None
    return value


def _printable(text: str) -> str:
    """`text` with any lone surrogate written as a backslash escape: logs never fail."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class WitHost:
    """The SDK's host protocol over the generated import functions."""

    def started(self, meta_json):
        wit.started(None if meta_json is None else _printable(meta_json))

    def start_agent(self, prompt, options, path) -> int:
        record = None
        if options is not None:
            tools = options.tools
            record = wit.AgentOptions(
                _text(options.schema, "schema"), _text(options.agent_type, "agent_type"),
                _text(options.label, "label"), _text(options.instruction, "instruction"),
                _text(options.model, "model"),
                None if tools is None else [_text(tool, "tools") for tool in tools],
                _text(options.instance_id, "instance_id"),
            )  # fmt: skip
        # The usual prompt is ASCII: checked here, as a call of `_text` costs more.
        if not prompt.isascii():
            prompt = _text(prompt, "prompt")
        handle, error = wit.start_agent(prompt, record, path)
        if error is not None:
            raise _failure(error)
        return handle

    def start_tool(self, name, arguments_json, path) -> int:
        handle, error = wit.start_tool(
            _text(name, "tool name"), _text(arguments_json, "tool arguments"), path
        )
        if error is not None:
            raise _failure(error)
        return handle

    def await_next(self) -> list:
        try:
            completions = wit.await_next()
        except Err as error:
            raise _call_failed(error) from None
        # The usual batch, in which no call failed, is the SDK's completions as it is.
        for _, _, error, _ in completions:
            if error is not None:
                return [
                    (handle, reply, None if error is None else _failure(error), text)
                    for handle, reply, error, text in completions
                ]
        return completions

    def phase(self, title):
        wit.phase(_printable(title))

    def log(self, message):
        wit.log(_printable(message))

    def branch_failed(self, failure):
        wit.branch_failed(
            wit.BranchFailure(
                wit.GroupKind[failure.group.upper()], failure.index, failure.stage,
                _printable(failure.exception), _printable(failure.message), failure.line,
            )
        )  # fmt: skip

    def placeholder_path(self, handle, constructs):
        wit.placeholder_path(handle, constructs)

    def budget(self) -> BudgetState:
        state = wit.budget()
        return BudgetState(state.total, state.spent, state.total_usd, state.spent_usd)

    def sleep(self, nanoseconds):
        wit.sleep(nanoseconds)


def _script_error(failure: ScriptFailure) -> Err:
    kind = wit_world.ScriptErrorKind[failure.kind.upper().replace("-", "_")]
    exception = None if failure.exception is None else _printable(failure.exception)
    return Err(wit_world.ScriptError(kind, _printable(failure.message), failure.line, exception))


HOST = WitHost()

# The guest's clocks are virtual; sleeping advances them instead of blocking the host thread.
time.sleep = flowbox_sdk.virtual_sleep(HOST)


class WitWorld(wit_world.WitWorld):
    def warm_up(self) -> None:
        """Nothing: the call alone makes componentize-py's runtime set itself up (see the WIT)."""

    def run(self, script: str, args: str, guard: bool, recursion_limit: int) -> str:
        try:
            return flowbox_sdk.run(HOST, script, args, Settings(guard, recursion_limit))
        except ScriptFailure as failure:
            raise _script_error(failure) from None

    def check(self, script: str, guard: bool) -> str:
        try:
            return _printable(flowbox_sdk.check(script, guard))
        except ScriptFailure as failure:
            raise _script_error(failure) from None

    def plan_notes(self, script: str, read_only_tools: list) -> str:
        try:
            return flowbox_sdk.plan_notes(HOST, script, read_only_tools)
        except ScriptFailure as failure:
            raise _script_error(failure) from None


# Everything up to here is start-up state that componentize-py snapshots into the component.
# One fixed warm-up of the SDK first, so the snapshot holds its specialised bytecode and type
# caches instead of every run building them anew (see flowbox_sdk.warmup). Then what the
# instance's one run will need whatever its script (its scheduler, primitives and globals), so
# the run starts with them made. Then collect once and freeze what survives, so no collection
# during a run traverses it again. A run allocates in bursts (a fan-out's branches, their calls
# and replies) and is short: the cyclic collector waits for 20 000 new container objects rather
# than CPython's 2 000, which spares a 1000-leaf fan-out ~7 % of its fuel and still collects a
# loop's cyclic garbage long before it fills the run's memory.
warmup.warm_up()
flowbox_sdk.make_ready(HOST)
gc.collect()
# What survives is listed for the host to make immortal (see flowbox_sdk.immortal).
_SNAPSHOT_OBJECTS = immortal.listed_for_host()
gc.freeze()
gc.set_threshold(20_000)


# componentize-py's runtime reseeds `random` on an instance's first export call (the warm-up),
# from 2,496 random bytes, with the `random.seed` it looks up once this module is imported. A
# run seeds the generator itself, from the run's deterministic randomness and only when its
# script can reach it (see `runner.run`), so that reseeding is work no run uses: the runtime
# gets a stand-in instead, which puts `random.seed` back for scripts and draws nothing.
_seed = random.seed


def _first_seed() -> None:
    random.seed = _seed


random.seed = _first_seed
