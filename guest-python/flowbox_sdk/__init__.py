"""The flowbox script SDK: runs a workflow script against a flowbox host.

`runner.run` / `runner.check` are the entry points; `host.Host` is the protocol a host
implements (over the WIT bindings in the guest, with a fake in the tests).
"""

from .host import (
    BudgetState,
    CallFailed,
    Completion,
    Host,
    Settings,
    virtual_sleep,
)
from .runner import check, run
from .script import ScriptFailure

__all__ = [
    "BudgetState",
    "CallFailed",
    "Completion",
    "Host",
    "ScriptFailure",
    "Settings",
    "check",
    "run",
    "virtual_sleep",
]
