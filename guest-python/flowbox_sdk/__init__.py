"""The flowbox script SDK: runs a workflow script against a flowbox host.

`runner.run` / `runner.check` / `runner.plan_notes` are the entry points (`runner.make_ready`
makes ahead what the next run needs); `host.Host` is the protocol a host
implements (over the WIT bindings in the guest, with a fake in the tests).
"""

from .errors import CallFailed, ScriptFailure
from .host import (
    AgentOptions,
    BranchFailure,
    BudgetState,
    Completion,
    Host,
    Settings,
    virtual_sleep,
)
from .runner import check, make_ready, plan_notes, run

__all__ = [
    "AgentOptions",
    "BranchFailure",
    "BudgetState",
    "CallFailed",
    "Completion",
    "Host",
    "ScriptFailure",
    "Settings",
    "check",
    "make_ready",
    "plan_notes",
    "run",
    "virtual_sleep",
]
