"""The values a run hands back: its outcome and summary, a leaf's request and reply, events."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

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
class Position:
    """Where a call sits in one enclosing ``parallel``/``pipeline`` group (a call's ``path``
    holds one per group, outermost first): the group's number in the run, its kind, the
    branch's or item's index in it, the group's size, and a pipeline item's stage."""

    group: int
    kind: str | None
    index: int
    size: int
    stage: int | None = None


@dataclass(frozen=True)
class Event:
    """One thing that happened in a run: the base of the typed events below, each with its
    ``type`` (as in the event stream's JSON, ``docs/events.md``) and its fields."""

    thread_id: str
    #: Position in the run's stream, from 1, without holes (a :class:`Gap` counts what a slow
    #: subscriber missed).
    seq: int
    #: When it was published, in microseconds since the Unix epoch (``None`` in events
    #: recorded before events had times, and in a :class:`Gap`).
    unix_us: int | None = None
    type: ClassVar[str] = "event"

    @staticmethod
    def from_json(event: dict[str, Any]) -> Event:
        """The typed event for one event of the stream's JSON."""
        cls = _EVENTS.get(event.get("type", ""))
        if cls is None:
            return UnknownEvent(
                thread_id=event["thread_id"],
                seq=event["seq"],
                unix_us=event.get("unix_us"),
                type_name=event.get("type", ""),
                data=event,
            )
        # A field the event leaves out (as it does a zero count) takes the field's default.
        values = {f.name: event.get(f.name, _default(f)) for f in dataclasses.fields(cls)}
        return cls(**{**values, **cls._convert(event)})

    @classmethod
    def _convert(cls, event: dict[str, Any]) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class RunStarted(Event):
    """The script passed its checks and is about to start; its ``meta`` name and phases."""

    name: str | None = None
    phases: list[dict[str, Any]] = field(default_factory=list)
    type: ClassVar[str] = "run_started"


@dataclass(frozen=True)
class Phase(Event):
    """The script entered a phase."""

    title: str = ""
    type: ClassVar[str] = "phase"


@dataclass(frozen=True)
class Log(Event):
    """A ``log`` or ``print`` line."""

    message: str = ""
    type: ClassVar[str] = "log"


def _default(field_: dataclasses.Field) -> Any:
    if field_.default is not dataclasses.MISSING:
        return field_.default
    if field_.default_factory is not dataclasses.MISSING:
        return field_.default_factory()
    return None


def _path(event: dict[str, Any]) -> dict[str, Any]:
    return {"path": [Position(**{"stage": None, "kind": None, **p}) for p in event.get("path", [])]}


@dataclass(frozen=True)
class LeafStarted(Event):
    """A leaf got a concurrency slot and started."""

    call_id: int = 0
    label: str | None = None
    agent_type: str | None = None
    prompt_preview: str = ""
    path: list[Position] = field(default_factory=list)
    #: The ``model`` option, when the script gave one.
    model: str | None = None
    #: How long it waited for its concurrency slot after the script called it.
    waited_ms: int = 0
    #: The leaves whose replies its prompt or instruction quotes word for word, in call order.
    fed_by: list[int] = field(default_factory=list)
    type: ClassVar[str] = "leaf_started"

    @classmethod
    def _convert(cls, event: dict[str, Any]) -> dict[str, Any]:
        return _path(event)


@dataclass(frozen=True)
class LeafFinished(Event):
    """A leaf finished (``replayed``: its answer came from the journal)."""

    call_id: int = 0
    ok: bool = True
    tokens: int = 0
    duration_ms: int = 0
    replayed: bool = False
    error: str | None = None
    #: What it cost at the runtime's prices, when it succeeded and its model is priced.
    cost_usd: float | None = None
    type: ClassVar[str] = "leaf_finished"


@dataclass(frozen=True)
class LeafTurn(Event):
    """One model turn of a leaf agent's loop ended (leaves of the provider backends)."""

    call_id: int = 0
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = 0
    error: str | None = None
    #: How many times its request was sent again after failures worth retrying.
    retries: int = 0
    type: ClassVar[str] = "leaf_turn"


@dataclass(frozen=True)
class LeafToolCalled(Event):
    """A leaf agent called one of its host tools."""

    call_id: int = 0
    name: str = ""
    type: ClassVar[str] = "leaf_tool_called"


@dataclass(frozen=True)
class LeafToolFinished(Event):
    """A host tool a leaf agent called returned."""

    call_id: int = 0
    name: str = ""
    ok: bool = True
    duration_ms: int = 0
    error: str | None = None
    type: ClassVar[str] = "leaf_tool_finished"


@dataclass(frozen=True)
class ToolCalled(Event):
    """The script called a host tool (``call_tool``)."""

    call_id: int = 0
    name: str = ""
    path: list[Position] = field(default_factory=list)
    type: ClassVar[str] = "tool_called"

    @classmethod
    def _convert(cls, event: dict[str, Any]) -> dict[str, Any]:
        return _path(event)


@dataclass(frozen=True)
class ToolFinished(Event):
    """A host tool the script called returned."""

    call_id: int = 0
    ok: bool = True
    duration_ms: int = 0
    replayed: bool = False
    error: str | None = None
    type: ClassVar[str] = "tool_finished"


@dataclass(frozen=True)
class BudgetWarning(Event):
    """The run's tokens crossed 80 % of its budget, or reached it."""

    spent: int = 0
    total: int = 0
    type: ClassVar[str] = "budget_warning"


@dataclass(frozen=True)
class RunFinished(Event):
    """The run ended: whether it produced a result, its summary, and its error."""

    ok: bool = True
    summary: Summary | None = None
    error: FlowboxError | None = None
    type: ClassVar[str] = "run_finished"

    @classmethod
    def _convert(cls, event: dict[str, Any]) -> dict[str, Any]:
        from .errors import from_json

        summary = Summary.from_json(event["summary"])
        error = event.get("error")
        return {"summary": summary, "error": from_json(error, summary) if error else None}


@dataclass(frozen=True)
class Gap(Event):
    """This subscriber fell behind and missed ``missed`` events."""

    missed: int = 0
    type: ClassVar[str] = "gap"


@dataclass(frozen=True)
class UnknownEvent(Event):
    """An event of a type this package does not know (from a newer engine): its JSON."""

    type_name: str = ""
    data: dict[str, Any] = field(default_factory=dict)


_EVENTS: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        RunStarted,
        Phase,
        Log,
        LeafStarted,
        LeafFinished,
        LeafTurn,
        LeafToolCalled,
        LeafToolFinished,
        ToolCalled,
        ToolFinished,
        BudgetWarning,
        RunFinished,
        Gap,
    )
}
