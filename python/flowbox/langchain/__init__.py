"""A drop-in for workflow-middleware 0.1.0 (a LangChain middleware), on flowbox's sandbox.

Change ``from workflow_middleware import ...`` to ``from flowbox.langchain import ...``: the names
of its ``__all__`` are here with its documented behaviour -- :class:`WorkflowMiddleware` adds one
``run_workflow`` tool to a ``create_agent`` agent and appends guidance to its system prompt
(opt-in, never overwriting it); leaves are ``create_agent`` instances on the orchestrator's model
and tools; ``max_concurrency``, ``max_agents_total`` and ``budget.total`` bound each run; runs are
counted per middleware and per conversation thread. The difference is where the scripts run:
in flowbox's WebAssembly sandbox, with fuel, memory and wall-clock limits, exact replay from a
journal, and typed errors -- where workflow-middleware runs them in-process with ``exec``.

Where the two differ (the script contract, the guidance text, resume), ``docs/python.md`` says
how.
"""

from .config import BudgetConfig, SandboxConfig, WorkflowConfig
from .executor import MetaError, ScriptError, SecurityError, run_workflow_script
from .leaves import FakeLeafBackend, LangChainLeafBackend, LeafBackend, LeafResult
from .middleware import RunWorkflowToolSchema, WorkflowMiddleware
from .prompts import get_workflow_guidance
from .runtime import EventSink, Runtime
from .state import WorkflowEvent, WorkflowState

__all__ = [
    "BudgetConfig",
    "EventSink",
    "FakeLeafBackend",
    "LangChainLeafBackend",
    "LeafBackend",
    "LeafResult",
    "MetaError",
    "RunWorkflowToolSchema",
    "Runtime",
    "SandboxConfig",
    "ScriptError",
    "SecurityError",
    "WorkflowConfig",
    "WorkflowEvent",
    "WorkflowMiddleware",
    "WorkflowState",
    "get_workflow_guidance",
    "run_workflow_script",
]
