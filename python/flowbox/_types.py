"""The values a run hands back: its outcome and summary, a leaf's request and reply, events."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .errors import FlowboxError


@dataclass(frozen=True)
class Limits:
    """The bounds a run is held to. A field left ``None`` keeps the runtime's value (whose
    defaults are in flowbox's documentation, ``docs/limits.md``)."""

    fuel: int | None = None
    memory_bytes: int | None = None
    #: Seconds.
    timeout: float | None = None
    max_agents: int | None = None
    max_tool_calls: int | None = None
    max_concurrency: int | None = None
    budget_tokens: int | None = None
    budget_usd: float | None = None
    gate_leaves: int | None = None
    gate_usd: float | None = None
    max_script_bytes: int | None = None
    max_output_bytes: int | None = None
    max_result_bytes: int | None = None
    max_message_bytes: int | None = None
    max_schema_bytes: int | None = None
    recursion_limit: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }


@dataclass(frozen=True)
class BranchFailure:
    """A ``parallel`` branch or ``pipeline`` item that failed and became ``None``."""

    group: str
    index: int
    stage: int | None
    exception: str
    message: str


@dataclass(frozen=True)
class Summary:
    """What a run did, filled in on failure too."""

    thread_id: str
    name: str | None
    leaves: int
    tools_called: int
    tokens_spent: int
    input_tokens: int
    output_tokens: int
    phases: list[str]
    logs: list[str]
    failed_branches: list[BranchFailure]
    warnings: list[str]
    fuel_used: int
    duration_ms: int
    #: Of the tokens, how many are estimates rather than counts a model reported.
    estimated_tokens: int = 0
    #: Branches that failed, when more failed than ``failed_branches`` lists.
    failed_branch_count: int = 0
    #: What the run cost, when the runtime has prices for its models.
    cost_usd: float | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Summary:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["failed_branches"] = [
            BranchFailure(
                **{k: b.get(k) for k in ("group", "index", "stage", "exception", "message")}
            )
            for b in data.get("failed_branches", [])
        ]
        return cls(**values)


@dataclass(frozen=True)
class Outcome:
    """The end of a run: its JSON ``result``, or the ``error`` it ended with, and its
    ``summary``. ``recorded`` says the thread had already finished and this is its journaled
    outcome (nothing ran)."""

    result: Any
    error: FlowboxError | None
    summary: Summary
    recorded: bool = False

    @property
    def ok(self) -> bool:
        """Whether the run produced a result."""
        return self.error is None

    @property
    def thread_id(self) -> str:
        """The run's thread id (to resume or show it)."""
        return self.summary.thread_id

    def unwrap(self) -> Any:
        """The result, or the run's error raised."""
        if self.error is not None:
            raise self.error
        return self.result


@dataclass(frozen=True)
class Usage:
    """Tokens one leaf call used."""

    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class LeafReply:
    """A leaf's answer: text (a ``str``) for a request without a schema, a JSON value that
    matches the schema for one with; and the tokens it used, when known (flowbox estimates
    them from the text's length otherwise)."""

    value: Any
    usage: Usage | None = None


@dataclass(frozen=True)
class LeafRequest:
    """One leaf call, as a Python leaf receives it."""

    #: The run's thread id.
    thread_id: str
    #: The call's number within its run.
    call_id: int
    #: The same every time this call is made again (on resume, say).
    idempotency_key: str
    #: A ``str`` for a text prompt, any JSON value otherwise.
    prompt: Any
    #: A JSON Schema the reply must match; ``None`` asks for text.
    schema: Any
    agent_type: str | None
    label: str | None
    instruction: str | None
    #: A model profile name.
    model: str | None
    #: The host tools the leaf may use: ``None`` for all, empty for none.
    tools: list[str] | None
    #: Calls with the same instance id share one conversation within a run.
    instance_id: str | None
    #: The conversation so far of this call's instance: ``{"role", "content"}`` turns.
    conversation: list[dict[str, str]] = field(default_factory=list)

    @property
    def prompt_text(self) -> str:
        """The prompt as text: a string prompt as it is, any other value as compact JSON."""
        from ._json import dumps

        return self.prompt if isinstance(self.prompt, str) else dumps(self.prompt)


@dataclass(frozen=True)
class Event:
    """One thing that happened in a run: its ``type`` (``run_started``, ``leaf_started``,
    ``leaf_finished``, ``log``, ``phase``, ``run_finished``, ...; ``docs/events.md`` lists them)
    and the fields of that type in ``data``."""

    thread_id: str
    seq: int
    type: str
    data: dict[str, Any]

    @classmethod
    def from_json(cls, event: dict[str, Any]) -> Event:
        event = dict(event)
        return cls(event.pop("thread_id"), event.pop("seq"), event.pop("type"), event)
