"""Every way a run or a call fails, in one place below the rest of the SDK: the WIT's error
kinds, `CallFailed` (the host refused or failed a call), the exceptions a script sees for a
failed call, and `ScriptFailure` (a script that did not run to a JSON result).
"""

# Why a call failed; the WIT `error-kind` cases, spelled as in the WIT.
AGENT_FAILED = "agent-failed"
BUDGET_EXCEEDED = "budget-exceeded"
AGENT_CAP_EXCEEDED = "agent-cap-exceeded"
TOOL_FAILED = "tool-failed"
TOOL_CAP_EXCEEDED = "tool-cap-exceeded"
INVALID_REQUEST = "invalid-request"

# Why a script did not run to a result; the WIT `script-error-kind` cases.
SYNTAX = "syntax"
INVALID_META = "invalid-meta"
FORBIDDEN = "forbidden"
NO_ENTRY_POINT = "no-entry-point"
UNCAUGHT = "uncaught"
OUT_OF_MEMORY = "out-of-memory"
INVALID_RESULT = "invalid-result"


class CallFailed(Exception):
    """The host refused or failed a call; `kind` is one of the call error kinds above,
    `retryable` whether the same call may succeed if made again, and `cause` the backend's
    word for the failure (such as "http" or "truncated"), when it gave one. Mirrors the WIT
    `call-error` record."""

    def __init__(self, kind: str, message: str, retryable: bool = False, cause: str | None = None):
        super().__init__(kind, message, retryable, cause)
        self.kind = kind
        self.message = message
        self.retryable = retryable
        self.cause = cause


class ScriptFailure(Exception):
    """A script that did not run to a JSON result; mirrors the WIT `script-error` record, with
    `kind` one of the script error kinds above."""

    def __init__(
        self,
        kind: str,
        message: str,
        line: int | None = None,
        exception: str | None = None,
    ):
        super().__init__(kind, message, line, exception)
        self.kind = kind
        self.message = message
        self.line = line
        self.exception = exception


# The exceptions a script sees for failed calls. They are injected into the script's globals,
# so `except BudgetExceeded:` works without an import.


class _CallError(Exception):
    """A failed call as the script sees it: `str(e)` is the message, `e.retryable` says
    whether making the same call again may succeed (a rate limit, a timeout), and `e.kind`
    names the failure in a word: the backend's cause when it gave one (such as
    "http" or "truncated"), else the call's own kind ("agent_failed",
    "budget_exceeded", ...)."""

    def __init__(self, message: str = "", *, kind: str = "", retryable: bool = False):
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable


class AgentError(_CallError):
    """A leaf agent failed."""


class BudgetExceeded(AgentError):
    """The run's token budget was spent before the leaf could start."""


class AgentCapExceeded(AgentError):
    """The run already started as many leaves as it may."""


class ToolError(_CallError):
    """A host tool failed or rejected its arguments."""


class ToolCapExceeded(ToolError):
    """The run already made as many tool calls as it may."""


# What a script's globals hold of the above, by name.
SCRIPT_EXCEPTIONS = {
    cls.__name__: cls
    for cls in (AgentError, BudgetExceeded, AgentCapExceeded, ToolError, ToolCapExceeded)
}

_EXCEPTION_FOR_KIND = {
    AGENT_FAILED: AgentError,
    BUDGET_EXCEEDED: BudgetExceeded,
    AGENT_CAP_EXCEEDED: AgentCapExceeded,
    TOOL_FAILED: ToolError,
    TOOL_CAP_EXCEEDED: ToolCapExceeded,
    # A malformed request is the script's programming error, like any bad argument.
    INVALID_REQUEST: ValueError,
}


def exception_for(failure: CallFailed) -> Exception:
    """The exception a script sees for a failed call."""
    cls = _EXCEPTION_FOR_KIND.get(failure.kind, AgentError)
    if not issubclass(cls, _CallError):
        return cls(failure.message)
    kind = failure.cause or failure.kind.replace("-", "_")
    return cls(failure.message, kind=kind, retryable=failure.retryable)


def exception_message(error: BaseException) -> str:
    """`str(error)`, or "" when a script-defined `__str__` fails."""
    try:
        return str(error)
    except Exception:
        return ""


def describe_error(error: BaseException) -> str:
    """`TypeName: message` (or just `TypeName`), for log lines about failures the script does
    not see."""
    message = exception_message(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
