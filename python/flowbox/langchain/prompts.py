"""The text an orchestrator's model is given: flowbox's guidance and the leaf addendum."""

from __future__ import annotations

import threading
from typing import Any

from .. import _native
from .._runtime import Runtime as _FlowboxRuntime

#: The leaf system prompt's addendum: a leaf's final message is its return value.
LEAF_PROMPT_ADDENDUM = (
    "## As a leaf of a workflow\n\n"
    "A workflow script started you for one task. Do that task with the tools you have, then "
    "give your answer as your final message: it is returned to the script as it is, so make it "
    "the answer itself, without preamble or questions back."
)


#: The ``run_workflow`` tool's description: flowbox's, which states the script contract.
RUN_WORKFLOW_DESCRIPTION: str = _native.RUN_WORKFLOW_DESCRIPTION

_GUIDANCE: dict[bool, str] = {}
_GUIDANCE_LOCK = threading.Lock()


def get_workflow_guidance(include_patterns: bool = False, override: str | None = None) -> str:
    """The text appended to the orchestrator's system prompt: ``override`` when given, else
    flowbox's guidance (the script contract the sandbox enforces, its default limits and,
    with ``include_patterns``, the pattern library)."""
    if override is not None:
        return override
    with _GUIDANCE_LOCK:
        if include_patterns not in _GUIDANCE:
            with _FlowboxRuntime("fake") as runtime:
                _GUIDANCE[include_patterns] = runtime.guidance(patterns=include_patterns)
        return _GUIDANCE[include_patterns]


def __getattr__(name: str) -> Any:
    # ``WORKFLOW_GUIDANCE`` and ``PATTERNS`` are built on first use (they need a runtime).
    if name == "WORKFLOW_GUIDANCE":
        return get_workflow_guidance()
    if name == "PATTERNS":
        short, full = get_workflow_guidance(), get_workflow_guidance(include_patterns=True)
        return full[len(short) :].lstrip("\n") if full.startswith(short) else full
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
