"""What the middleware records of its runs."""

from __future__ import annotations

from typing import Annotated, NotRequired, TypedDict

from langchain.agents.middleware.types import AgentState, PrivateStateAttr


class WorkflowEvent(TypedDict):
    """One finished run of a middleware: ``kind`` (``"run"``), ``detail`` (the script's
    ``meta.name``, else ``"workflow"``), its counts and phases, and (flowbox's additions) the
    conversation thread it ran in and its own workflow thread id."""

    kind: str
    detail: str
    agents_spawned: int
    tokens_spent: int
    phases: list[str]
    thread_id: NotRequired[str | None]
    workflow_thread_id: NotRequired[str]


class WorkflowState(AgentState):  # type: ignore[misc]
    """The agent state the middleware declares (its run history lives on the middleware)."""

    _workflow_events: Annotated[NotRequired[list[WorkflowEvent] | None], PrivateStateAttr]
    _workflow_runs_total: Annotated[NotRequired[int], PrivateStateAttr]
