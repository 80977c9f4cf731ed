"""A fake flowbox host for running the SDK on native CPython: it records every call, answers
leaves deterministically, and lets a test choose which completions each `await_next` returns,
in which order, and which calls fail.
"""

import json
import textwrap
from collections.abc import Callable
from typing import NamedTuple

from flowbox_sdk import runner
from flowbox_sdk.errors import CallFailed, ScriptFailure
from flowbox_sdk.host import AgentOptions, BudgetState, Completion, Path, Settings


class AgentRequest(NamedTuple):
    """One `agent(...)` call as the host received it: the prompt, every option (None when the
    call passed no options at all) and the path."""

    prompt: str
    schema: str | None
    agent_type: str | None
    label: str | None
    instruction: str | None
    model: str | None
    tools: list[str] | None
    instance_id: str | None
    path: Path


class ToolRequest(NamedTuple):
    name: str
    arguments: dict
    path: list


# Like the real host, the fake one is out of a script's reach: it writes replies and reads tool
# arguments with objects of its own, made now, so a script that reconfigures `json` (which is
# this process's json too) changes nothing of them.
_write_reply = json.encoder.c_make_encoder(
    None, None, json.encoder.c_encode_basestring_ascii, None, ": ", ", ", False, False, True
)
_read_arguments = json.JSONDecoder().raw_decode


def src(text: str) -> str:
    """A test script: dedented, and starting on line 1 with its first real line."""
    return textwrap.dedent(text).lstrip("\n")


def echo(request) -> object:
    """The default agent: echoes a text prompt, or the prompt value for schema requests."""
    prompt = json.loads(request.prompt)
    if request.schema is not None:
        return {"echo": prompt}
    return f"echo: {prompt}" if isinstance(prompt, str) else f"echo: {request.prompt}"


class FakeHost:
    def __init__(self, guard: bool = True, recursion_limit: int = 1000):
        self.guard = guard
        self.recursion_limit = recursion_limit
        self.calls = []  # (method name, arguments) for every protocol call, in order
        # Replies: agent(request) and tool(name, arguments) return a JSON value or raise
        # CallFailed, which becomes a failed completion.
        self.agent: Callable = echo
        self.tool: Callable = lambda name, arguments: {"tool": name, "arguments": arguments}
        # Refusals at start: return (kind, message) to make start_agent/start_tool fail.
        self.refuse: Callable = lambda request: None
        # Which pending handles one await_next delivers, in order; default all, in start order.
        self.deliver: Callable[[list], list] = lambda pending: list(pending)
        self.requests = {}  # handle -> AgentRequest or ToolRequest
        self.pending = []
        self.batches = []  # the handles each await_next returned
        self.budget_total: int | None = None
        self.spent = 0
        self.budget_usd: float | None = None
        self.spent_usd: float | None = None
        self.tokens_per_leaf = 0
        self.await_error: CallFailed | None = None

    # --- the protocol ----------------------------------------------------------------------

    def started(self, meta_json):
        self.calls.append(("started", (meta_json,)))

    def start_agent(self, prompt, options, path) -> int:
        assert options is None or (isinstance(options, AgentOptions) and options != AgentOptions())
        request = AgentRequest(prompt, *(options or AgentOptions()), path)
        self.calls.append(("start_agent", (request,)))
        return self._start(request)

    def start_tool(self, name, arguments_json, path) -> int:
        self.calls.append(("start_tool", (name, arguments_json, path)))
        return self._start(ToolRequest(name, _read_arguments(arguments_json)[0], path))

    def await_next(self) -> list:
        self.calls.append(("await_next", ()))
        if self.await_error is not None:
            raise self.await_error
        if not self.pending:
            raise CallFailed("invalid-request", "no call is pending")
        chosen = self.deliver(list(self.pending))
        assert chosen and all(handle in self.pending for handle in chosen), chosen
        self.batches.append(chosen)
        completions = []
        for handle in chosen:
            self.pending.remove(handle)
            completions.append(self._complete(handle))
        return completions

    def phase(self, title):
        self.calls.append(("phase", (title,)))

    def log(self, message):
        self.calls.append(("log", (message,)))

    def branch_failed(self, failure):
        self.calls.append(("branch_failed", (failure,)))

    def placeholder_path(self, handle, constructs):
        self.calls.append(("placeholder_path", (handle, constructs)))

    def budget(self) -> BudgetState:
        self.calls.append(("budget", ()))
        return BudgetState(self.budget_total, self.spent, self.budget_usd, self.spent_usd)

    def sleep(self, nanoseconds):
        self.calls.append(("sleep", (nanoseconds,)))

    # --- helpers -------------------------------------------------------------------------

    def _start(self, request) -> int:
        refusal = self.refuse(request)
        if refusal is not None:
            raise CallFailed(*refusal)
        handle = len(self.requests) + 1
        self.requests[handle] = request
        self.pending.append(handle)
        return handle

    def _complete(self, handle) -> Completion:
        request = self.requests[handle]
        try:
            if isinstance(request, AgentRequest):
                value = self.agent(request)
            else:
                value = self.tool(request.name, request.arguments)
        except CallFailed as failure:
            return Completion(handle, "", failure)
        self.spent += self.tokens_per_leaf
        # As the real host does: a text reply as it is, any other as JSON text.
        if isinstance(value, str):
            return Completion(handle, value, None, True)
        return Completion(handle, "".join(_write_reply(value, 0)), None)

    def named(self, method: str) -> list:
        """The arguments of every call to `method`, in order."""
        return [arguments for name, arguments in self.calls if name == method]

    @property
    def logs(self) -> list:
        return [message for (message,) in self.named("log")]

    @property
    def failures(self) -> list:
        """The BranchFailure of every branch reported failed, in order."""
        return [failure for (failure,) in self.named("branch_failed")]

    @property
    def settings(self) -> Settings:
        """What the host's `run` export passes the guest."""
        return Settings(self.guard, self.recursion_limit)

    @property
    def agent_requests(self) -> list:
        return [request for (request,) in self.named("start_agent")]

    def run(self, source: str, args=None):
        """Runs a script and returns its decoded result."""
        return json.loads(runner.run(
            self, source, json.dumps(args if args is not None else {}), self.settings
        ))

    def fail(self, source: str, args=None) -> ScriptFailure:
        """Runs a script that must fail; returns the failure."""
        try:
            result = runner.run(
            self, source, json.dumps(args if args is not None else {}), self.settings
        )
        except ScriptFailure as failure:
            return failure
        raise AssertionError(f"the script succeeded with {result}")

    def check(self, source: str):
        return json.loads(runner.check(source, self.guard))

    def check_fails(self, source: str) -> ScriptFailure:
        try:
            meta = runner.check(source, self.guard)
        except ScriptFailure as failure:
            return failure
        raise AssertionError(f"the check passed with meta {meta}")
