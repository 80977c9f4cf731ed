"""The flowbox guest's WIT export: adapts the generated bindings (`wit_world`) to the SDK's host
protocol and hands `run`/`check` to the SDK. componentize-py runs this module at build time and
snapshots the interpreter, so whatever it imports is all that exists at run time.
"""

# Importing flowbox_sdk preloads the standard library scripts may use: `flowbox_sdk.modules`
# imports every allowed module (ALLOWED_MODULES) and the helpers they import lazily.
import functools
import gc
import os
import random
import time

import wit_world
from componentize_py_types import Err, Ok
from wit_world.imports import host as wit

import flowbox_sdk
from flowbox_sdk import BudgetState, CallFailed, Completion, ScriptFailure, Settings


def _kind_name(kind) -> str:
    """A WIT enum case as the SDK spells it: ErrorKind.AGENT_FAILED -> "agent-failed"."""
    return kind.name.lower().replace("_", "-")


def _call_failed(error: Err) -> CallFailed:
    return CallFailed(_kind_name(error.value.kind), error.value.message)


def _positions(path) -> list:
    return [wit.Position(group, index) for group, index in path] if path else []


class WitHost:
    """The SDK's host protocol over the generated import functions."""

    def settings(self) -> Settings:
        settings = wit.settings()
        return Settings(settings.guard, settings.recursion_limit)

    def started(self, meta_json):
        wit.started(meta_json)

    def start_agent(
        self, prompt, schema, agent_type, label, instruction, model, tools, instance_id, path
    ) -> int:
        wit_request = wit.AgentRequest(
            prompt, schema, agent_type, label, instruction, model, tools, instance_id,
            _positions(path),
        )  # fmt: skip
        try:
            return wit.start_agent(wit_request)
        except Err as error:
            raise _call_failed(error) from None

    def start_tool(self, name, arguments_json, path) -> int:
        try:
            return wit.start_tool(name, arguments_json, _positions(path))
        except Err as error:
            raise _call_failed(error) from None

    def await_next(self) -> list:
        try:
            completions = wit.await_next()
        except Err as error:
            raise _call_failed(error) from None
        return [_completion(completion) for completion in completions]

    def phase(self, title):
        wit.phase(title)

    def log(self, message):
        wit.log(message)

    def budget(self) -> BudgetState:
        state = wit.budget()
        return BudgetState(state.total, state.spent)

    def sleep(self, nanoseconds):
        wit.sleep(nanoseconds)


# Completion(...) runs NamedTuple's Python-level __new__; this builds the same tuple in C.
_new_completion = functools.partial(tuple.__new__, Completion)


def _completion(completion) -> Completion:
    outcome = completion.outcome
    if type(outcome) is Ok:
        return _new_completion((completion.handle, True, outcome.value))
    error = outcome.value
    return _new_completion((completion.handle, False, (_kind_name(error.kind), error.message)))


def _script_error(failure: ScriptFailure) -> Err:
    kind = wit_world.ScriptErrorKind[failure.kind.upper().replace("-", "_")]
    return Err(wit_world.ScriptError(kind, failure.message, failure.line, failure.exception))


HOST = WitHost()

# The guest's clocks are virtual; sleeping advances them instead of blocking the host thread.
time.sleep = flowbox_sdk.virtual_sleep(HOST)


class WitWorld(wit_world.WitWorld):
    def run(self, script: str, args: str) -> str:
        # The host makes WASI randomness deterministic per run; seeding from it here makes the
        # script's `random` replay exactly, whatever state a previous run left behind.
        random.seed(os.urandom(32))
        try:
            return flowbox_sdk.run(HOST, script, args)
        except ScriptFailure as failure:
            raise _script_error(failure) from None

    def check(self, script: str) -> str:
        try:
            return flowbox_sdk.check(HOST, script)
        except ScriptFailure as failure:
            raise _script_error(failure) from None


# Everything up to here is start-up state that componentize-py snapshots into the component.
# Collect once and freeze what survives, so no collection during a run traverses it again.
gc.collect()
gc.freeze()
