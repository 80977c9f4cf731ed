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
    Event,
    LeafReply,
    LeafRequest,
    Limits,
    Outcome,
    Summary,
    Usage,
)
from .errors import FlowboxError, LeafError

__all__ = [
    "BranchFailure",
    "Event",
    "Events",
    "FlowboxError",
    "Leaf",
    "LeafError",
    "LeafReply",
    "LeafRequest",
    "Limits",
    "NotJson",
    "Outcome",
    "Provider",
    "Runtime",
    "Summary",
    "Tool",
    "Usage",
    "errors",
    "tool",
]
