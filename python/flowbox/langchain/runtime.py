"""One run's host: a flowbox runtime whose leaves a :class:`LeafBackend` answers."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from .. import errors
from .._runtime import Runtime as _FlowboxRuntime
from .._types import LeafReply, LeafRequest, Usage
from .config import WorkflowConfig
from .leaves import LeafBackend, LeafResult

logger = logging.getLogger(__name__)

# How long a leaf waits for the event stream to report its start before it reports its own.
_STREAM_WAIT_SECS = 5.0


#: Called with each event of a run, as a dict (``script``, ``phase``, ``log``, ``agent_start``,
#: ``agent_end``); an exception it raises is logged and ignored.
EventSink = Callable[[dict[str, Any]], None]


class Runtime:
    """One run's host: the flowbox runtime whose leaves ``backend`` answers, under
    ``config``'s limits, reporting to ``event_sink``. :func:`run_workflow_script` builds one
    per run."""

    def __init__(
        self,
        *,
        backend: LeafBackend,
        args: Any,
        config: WorkflowConfig,
        event_sink: EventSink | None = None,
    ) -> None:
        self._backend = backend
        self._args = args
        self._config = config
        self._event_sink = event_sink
        self._phases: list[str] = []
        self._phase: str | None = None
        # Set when the event stream has delivered a leaf's start, and with it every phase the
        # script entered before: a leaf's events name the phase it started in.
        self._started: dict[int, asyncio.Event] = {}
        #: The script's ``meta["name"]``, once it has run.
        self.name: str | None = None
        self._summary: dict[str, Any] = {
            "agents_spawned": 0,
            "tokens_spent": 0,
            "phases": [],
            "logs": [],
        }
        self.flowbox = _FlowboxRuntime(
            self._leaf, limits=config.flowbox_limits(), journal=config.journal
        )

    def _emit(self, event: dict[str, Any]) -> None:
        if self._event_sink is None:
            return
        try:
            self._event_sink(event)
        except Exception:  # noqa: BLE001 - a broken sink never breaks a run
            logger.warning("a workflow event sink raised", exc_info=True)

    async def _leaf(self, request: LeafRequest) -> LeafReply:
        prompt = request.prompt if isinstance(request.prompt, str) else request.prompt_text
        try:
            await asyncio.wait_for(self._start_signal(request.call_id).wait(), _STREAM_WAIT_SECS)
        except TimeoutError:
            pass  # The events lag behind: the phase may be the one before.
        common = {"id": f"a{request.call_id}", "label": request.label}
        self._emit(
            {
                "type": "agent_start",
                **common,
                "agent_type": request.agent_type,
                "phase": self._phase,
                "prompt": prompt,
            }
        )
        result = await self._backend.run(
            prompt, schema=request.schema, agent_type=request.agent_type, label=request.label
        )
        if not isinstance(result, LeafResult):
            raise TypeError(f"a LeafBackend returns a LeafResult, not a {type(result).__name__}")
        structured = _jsonable(result.structured)
        self._emit(
            {
                "type": "agent_end",
                **common,
                "phase": self._phase,
                "tokens": result.tokens,
                "text": result.text,
                "structured": structured,
            }
        )
        value = structured if request.schema is not None else result.text
        return LeafReply(value, Usage(input_tokens=0, output_tokens=int(result.tokens)))

    async def meta_name(self, script: str) -> str | None:
        """The script's ``meta["name"]``, or ``None`` (no meta, or a script that does not
        check: running it will say why)."""
        try:
            meta = await self.flowbox.check(script)
        except errors.FlowboxError:
            return None
        return meta.get("name") if isinstance(meta, dict) else None

    async def execute(self, script: str, thread_id: str) -> tuple[Any, dict[str, Any]]:
        """Runs (or, from its journal, resumes) ``script`` as thread ``thread_id``."""
        with self.flowbox:
            async with self.flowbox.events(lossless=True) as events:
                follow = asyncio.ensure_future(self._follow(events, thread_id))
                try:
                    outcome = await self._run_or_resume(script, thread_id)
                    if not outcome.recorded:
                        # The events trail the outcome: the sink gets the run's last ones.
                        await asyncio.wait_for(asyncio.shield(follow), _STREAM_WAIT_SECS)
                except TimeoutError:
                    pass
                finally:
                    follow.cancel()
            summary = outcome.summary
            self.name = summary.name
            self._summary = {
                "agents_spawned": summary.leaves,
                "tokens_spent": summary.tokens_spent,
                "phases": list(summary.phases),
                "logs": list(summary.logs),
            }
            if outcome.error is not None:
                from .executor import _script_error

                raise _script_error(outcome.error)
            return outcome.result, self.summary()

    async def _run_or_resume(self, script: str, thread_id: str) -> Any:
        if self._config.journal is not None:
            try:
                thread = await self.flowbox.show(thread_id)
            except errors.UnknownThread:
                thread = None
            # An interrupted thread of the same script resumes; any other id runs anew (and a
            # thread of another script is refused as a divergence, never silently resumed).
            header = (thread or {}).get("header") or {}
            if (
                thread is not None
                and thread.get("outcome") is None
                and header.get("script") == script
            ):
                return await self.flowbox.resume(thread_id)
        return await self.flowbox.run(script, self._args, thread_id=thread_id)

    async def _follow(self, events: Any, thread_id: str) -> None:
        async for event in events:
            if event.thread_id != thread_id:
                continue
            if event.type == "phase":
                self._phase = event.title
                self._phases.append(self._phase)
                self._emit({"type": "phase", "index": len(self._phases) - 1, "title": self._phase})
            elif event.type == "leaf_started":
                self._start_signal(event.call_id).set()
            elif event.type == "log":
                self._emit({"type": "log", "message": event.message})
            elif event.type == "run_finished":
                return

    def _start_signal(self, call_id: int) -> asyncio.Event:
        return self._started.setdefault(call_id, asyncio.Event())

    def summary(self) -> dict[str, Any]:
        """``agents_spawned``, ``tokens_spent``, ``phases`` and ``logs`` of the run."""
        return {key: value for key, value in self._summary.items()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value
