"""Running a workflow script: the errors its users catch, and :func:`run_workflow_script`."""

from __future__ import annotations

from typing import Any

from .. import errors
from .config import WorkflowConfig
from .leaves import LeafBackend
from .runtime import EventSink, Runtime


class MetaError(ValueError):
    """The script's ``meta`` is invalid, or the script does not parse."""


class ScriptError(Exception):
    """The script could not run to its end: no ``async def main()`` or final ``return``, an
    uncaught exception, a breached limit, a result that is not JSON. ``flowbox_error`` is
    flowbox's own error (with its ``kind``, ``line`` and ``hint``)."""

    flowbox_error: errors.FlowboxError | None = None


class SecurityError(ScriptError):
    """flowbox's guard refused a construct (an import outside the allowed modules, a dunder,
    ``open``, ``eval``, ...), with its line."""


def _script_error(error: errors.FlowboxError) -> Exception:
    where = f" (line {error.line})" if error.line is not None else ""
    if error.kind in ("invalid_meta", "syntax"):
        raised: Exception = MetaError(f"{error.message}{where}")
    elif error.kind == "forbidden":
        raised = SecurityError(f"{error.message}{where}")
    elif error.kind == "uncaught":
        raised = ScriptError(f"workflow main() raised {error.exception}: {error.message}{where}")
    else:
        raised = ScriptError(f"{error.message}{where}")
    raised.flowbox_error = error  # type: ignore[attr-defined]
    raised.__cause__ = error
    return raised


async def run_workflow_script(
    script: str,
    *,
    args: Any,
    backend: LeafBackend,
    config: WorkflowConfig,
    thread_id: str,
    event_sink: EventSink | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Runs a workflow script in flowbox's sandbox and returns ``(result, summary)``; raises
    :class:`MetaError`, :class:`SecurityError` or :class:`ScriptError` (each with the
    ``flowbox_error`` it came from). With ``config.journal``, a thread id whose run was
    interrupted resumes it, and one that finished returns its recorded result."""
    runtime = Runtime(backend=backend, args=args, config=config, event_sink=event_sink)
    return await runtime.execute(script, thread_id)


def extract_meta(script: str) -> dict[str, Any]:
    """The script's ``meta``, as flowbox's guard reads it; :class:`MetaError` when it is invalid
    or missing (flowbox itself lets a script leave ``meta`` out)."""
    import asyncio

    from .._runtime import Runtime as _FlowboxRuntime

    async def check() -> Any:
        with _FlowboxRuntime("fake") as runtime:
            return await runtime.check(script)

    try:
        meta = asyncio.run(check())
    except errors.FlowboxError as error:
        raise _script_error(error) from error
    if meta is None:
        raise MetaError("script is missing a top-level `meta = {...}` assignment.")
    return meta
