"""flowbox: run the short Python workflow scripts a language model writes -- its agent calls,
``parallel`` fan-outs and pipelines -- in a bounded, isolated, deterministic WebAssembly
sandbox, with the leaves answered by your own Python code, a chat provider or an offline fake.

>>> import flowbox
>>> async def leaf(request: flowbox.LeafRequest) -> str:
...     return f"echo: {request.prompt}"
>>> rt = flowbox.Runtime(leaf)
>>> rt.run_sync("return await agent('hi')").unwrap()
'echo: hi'

The guide is ``docs/python.md`` in flowbox's repository.
"""

from . import errors
from ._json import NotJson
from ._runtime import Events, Leaf, Provider, Runtime
from ._tools import Tool, tool
from ._types import (
    BranchFailure,
    BudgetWarning,
    Event,
    Gap,
    LeafFinished,
    LeafReply,
    LeafRequest,
    LeafStarted,
    LeafToolCalled,
    LeafToolFinished,
    LeafTurn,
    Limits,
    Log,
    Outcome,
    Phase,
    Position,
    RunFinished,
    RunStarted,
    Summary,
    ToolCalled,
    ToolFinished,
    UnknownEvent,
    Usage,
)
from .errors import FlowboxError, LeafError

__all__ = [
    "BranchFailure",
    "BudgetWarning",
    "Event",
    "Events",
    "FlowboxError",
    "Gap",
    "Leaf",
    "LeafError",
    "LeafFinished",
    "LeafReply",
    "LeafRequest",
    "LeafStarted",
    "LeafToolCalled",
    "LeafToolFinished",
    "LeafTurn",
    "Limits",
    "Log",
    "NotJson",
    "Outcome",
    "Phase",
    "Position",
    "Provider",
    "RunFinished",
    "RunStarted",
    "Runtime",
    "Summary",
    "Tool",
    "ToolCalled",
    "ToolFinished",
    "UnknownEvent",
    "Usage",
    "errors",
    "tool",
]
