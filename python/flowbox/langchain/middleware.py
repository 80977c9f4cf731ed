"""The middleware: the ``run_workflow`` tool and the guidance on every model call."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware.types import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from .config import WorkflowConfig
from .leaves import LangChainLeafBackend, LeafBackend
from .prompts import RUN_WORKFLOW_DESCRIPTION, get_workflow_guidance
from .runtime import EventSink, Runtime
from .state import WorkflowEvent, WorkflowState

logger = logging.getLogger(__name__)


class RunWorkflowToolSchema(BaseModel):
    """Args schema for the run_workflow tool."""

    script: str = Field(
        description=(
            "A complete Python workflow script: an optional `meta = {...}` literal, then "
            "`async def main(): ...` (or top-level steps ending in `return`), using the "
            "injected primitives (agent, parallel, pipeline, phase, log, args, budget)."
        )
    )
    args: dict[str, Any] | list[Any] | str | int | float | bool | None = Field(
        default=None, description="Optional JSON value passed to the script as `args`."
    )


def _system_message_text(message: SystemMessage | None) -> str | None:
    if message is None:
        return None
    texts = [
        str(block.get("text", ""))
        for block in message.content_blocks
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    text = "\n\n".join(t for t in texts if t)
    return text or None


def _to_tool_output(result: Any) -> str:
    import json

    try:
        return json.dumps(result, ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError):
        return str(result)


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)


def _conversation_thread() -> str | None:
    try:
        from langgraph.config import get_config

        return get_config().get("configurable", {}).get("thread_id")
    except Exception:  # noqa: BLE001 - outside a graph there is no conversation thread
        return None


class WorkflowMiddleware(AgentMiddleware):  # type: ignore[misc]
    """Gives a ``create_agent`` agent the ``run_workflow`` tool, whose scripts run in
    flowbox's sandbox, and (unless ``config.inject_workflow_guidance`` is false) appends the
    guidance to its system prompt on every model call, never replacing it.

    Leaves are answered by ``backend`` when given; otherwise by a
    :class:`LangChainLeafBackend` on the orchestrator's own model (or ``config.leaf_model``),
    tools (less ``run_workflow``: leaves do not start workflows) and system prompt, with
    ``subagents`` as named agent types. ``event_sink`` gets every run's events.
    """

    state_schema = WorkflowState

    def __init__(
        self,
        config: WorkflowConfig | None = None,
        *,
        backend: LeafBackend | None = None,
        subagents: list[dict[str, Any]] | None = None,
        event_sink: EventSink | None = None,
    ) -> None:
        super().__init__()
        self._config = config or WorkflowConfig()
        self._backend = backend
        self._event_sink = event_sink
        self._last_request: ModelRequest | None = None
        named = {
            spec["name"]: {key: value for key, value in spec.items() if key != "name"}
            for spec in subagents or []
            if spec.get("name")
        }
        self._subagents = named or None
        self._lock = threading.Lock()
        self._run_counter = 0
        self._workflow_events: list[WorkflowEvent] = []
        self._workflow_runs_total = 0
        self.tools = [self._create_run_workflow_tool()]

    # Guidance.

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        self._last_request = request
        return handler(self._inject_guidance(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        self._last_request = request
        return await handler(self._inject_guidance(request))

    def _inject_guidance(self, request: ModelRequest) -> ModelRequest:
        if not self._config.inject_workflow_guidance:
            return request
        text = get_workflow_guidance(
            include_patterns=self._config.include_patterns, override=self._config.system_prompt
        )
        return request.override(
            system_message=self._append_to_system_message(request.system_message, text)
        )

    @staticmethod
    def _append_to_system_message(system_message: SystemMessage | None, text: str) -> SystemMessage:
        blocks = list(system_message.content_blocks) if system_message is not None else []
        if blocks:
            text = "\n\n" + text
        blocks.append({"type": "text", "text": text})
        return SystemMessage(content_blocks=blocks)

    # The tool.

    def _create_run_workflow_tool(self) -> BaseTool:
        middleware = self

        async def run_workflow_async(script: str, args: Any = None) -> str:
            return await middleware._run(script, args, request=None)

        def run_workflow_sync(script: str, args: Any = None) -> str:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(run_workflow_async(script, args))
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                return pool.submit(asyncio.run, run_workflow_async(script, args)).result()

        return StructuredTool.from_function(
            name="run_workflow",
            func=run_workflow_sync,
            coroutine=run_workflow_async,
            description=RUN_WORKFLOW_DESCRIPTION,
            infer_schema=False,
            args_schema=RunWorkflowToolSchema,
        )

    def _resolve_backend(self, request: ModelRequest | None) -> LeafBackend:
        if self._backend is not None:
            return self._backend
        request = request or self._last_request
        if request is None:
            raise RuntimeError(
                "WorkflowMiddleware has no backend and no request to build one from; pass "
                "backend=... or run inside a model call."
            )
        tools = [
            tool for tool in request.tools or [] if getattr(tool, "name", None) != "run_workflow"
        ]
        options: dict[str, Any] = {}
        if self._config.leaf_prompt_addendum is not None:
            options["leaf_prompt_addendum"] = self._config.leaf_prompt_addendum
        return LangChainLeafBackend(
            model=self._config.leaf_model or request.model,
            tools=tools,
            system_prompt=_system_message_text(request.system_message),
            named_subagents=self._subagents,
            **options,
        )

    async def _run(self, script: str, args: Any, *, request: ModelRequest | None) -> str:
        backend = self._resolve_backend(request)
        digest = hashlib.sha256(script.encode()).hexdigest()[:12]
        with self._lock:
            self._run_counter += 1
            thread_id = f"workflow_{self._run_counter}_{uuid.uuid4().hex[:8]}_{digest}"
        runtime = Runtime(
            backend=backend, args=args, config=self._config, event_sink=self._event_sink
        )
        try:
            if self._event_sink is not None:
                runtime._emit(
                    {"type": "script", "script": script, "name": await runtime.meta_name(script)}
                )
            result, summary = await runtime.execute(script, thread_id)
        except Exception as error:  # noqa: BLE001 - the model reads every failure
            logger.warning("run_workflow failed: %s", error, exc_info=True)
            hint = getattr(getattr(error, "flowbox_error", None), "hint", None)
            return f"Workflow failed: {error}" + (f"\nHint: {hint}" if hint else "")
        self._record_run(runtime.name, summary, thread_id)
        return _to_tool_output(result)

    def _record_run(
        self, name: str | None, summary: dict[str, Any], workflow_thread_id: str
    ) -> None:
        event = WorkflowEvent(
            kind="run",
            detail=name or "workflow",
            agents_spawned=int(summary["agents_spawned"]),
            tokens_spent=int(summary["tokens_spent"]),
            phases=list(summary["phases"]),
            thread_id=_conversation_thread(),
            workflow_thread_id=workflow_thread_id,
        )
        with self._lock:
            self._workflow_events.append(event)
            self._workflow_runs_total += 1

    def get_events(self, thread_id: str | None = None) -> list[WorkflowEvent]:
        """The runs this middleware finished, oldest first; with ``thread_id``, those of that
        conversation thread only."""
        with self._lock:
            return [
                dict(event)  # type: ignore[misc]
                for event in self._workflow_events
                if thread_id is None or event.get("thread_id") == thread_id
            ]

    def get_total_runs(self, thread_id: str | None = None) -> int:
        """How many runs this middleware finished (in ``thread_id``, when given)."""
        return len(self.get_events(thread_id))
