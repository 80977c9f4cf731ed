"""The host protocol: what the SDK asks of the flowbox host, and the exceptions scripts see.

`app.py` implements `Host` over the generated WIT bindings; the tests implement it with a fake.
Nothing else in the SDK knows the bindings exist.
"""

from typing import NamedTuple, Protocol

# Why a call failed; the WIT `error-kind` cases, spelled as in the WIT.
AGENT_FAILED = "agent-failed"
BUDGET_EXCEEDED = "budget-exceeded"
AGENT_CAP_EXCEEDED = "agent-cap-exceeded"
TOOL_FAILED = "tool-failed"
INVALID_REQUEST = "invalid-request"

# One step of the script tree: (group, index), outermost group first.
Path = list[tuple[int, int]]


class CallFailed(Exception):
    """The host refused or failed a call; `kind` is one of the error-kind strings above."""

    def __init__(self, kind: str, message: str):
        super().__init__(kind, message)
        self.kind = kind
        self.message = message


class Settings(NamedTuple):
    guard: bool
    recursion_limit: int


class BudgetState(NamedTuple):
    total: int | None
    spent: int


class Completion(NamedTuple):
    """One finished call: the reply's JSON text when `ok`, else a `(kind, message)` pair."""

    handle: int
    ok: bool
    payload: str | tuple[str, str]


class Host(Protocol):
    def settings(self) -> Settings: ...

    def started(self, meta_json: str | None) -> None: ...

    def start_agent(
        self,
        prompt: str,
        schema: str | None,
        agent_type: str | None,
        label: str | None,
        instruction: str | None,
        model: str | None,
        tools: list[str] | None,
        instance_id: str | None,
        path: Path,
    ) -> int:
        """Starts one `agent(...)` call, given the fields of the WIT `agent-request` record in
        its order. Returns the call's handle; raises `CallFailed` when the host refuses it."""

    def start_tool(self, name: str, arguments_json: str, path: Path) -> int:
        """Returns the call's handle; raises `CallFailed` when the host refuses it."""

    def await_next(self) -> list[Completion]:
        """Blocks until a started call finished; raises `CallFailed` when none is pending."""

    def phase(self, title: str) -> None: ...

    def log(self, message: str) -> None: ...

    def budget(self) -> BudgetState: ...

    def sleep(self, nanoseconds: int) -> None: ...


# The exceptions a script sees for failed calls. They are injected into the script's globals,
# so `except BudgetExceeded:` works without an import.


class AgentError(Exception):
    """A leaf agent failed."""


class BudgetExceeded(AgentError):
    """The run's token budget was spent before the leaf could start."""


class AgentCapExceeded(AgentError):
    """The run already started as many leaves as it may."""


class ToolError(Exception):
    """A host tool failed or rejected its arguments."""


_EXCEPTION_FOR_KIND = {
    AGENT_FAILED: AgentError,
    BUDGET_EXCEEDED: BudgetExceeded,
    AGENT_CAP_EXCEEDED: AgentCapExceeded,
    TOOL_FAILED: ToolError,
    # A malformed request is the script's programming error, like any bad argument.
    INVALID_REQUEST: ValueError,
}


def exception_for(kind: str, message: str) -> Exception:
    """The exception a script sees for a failed call."""
    return _EXCEPTION_FOR_KIND.get(kind, AgentError)(message)


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


U64_MAX = 2**64 - 1


def virtual_sleep(host: Host):
    """A `time.sleep` replacement that advances the host's virtual clock instead of blocking."""

    def sleep(seconds):
        if not isinstance(seconds, (int, float)):
            raise TypeError(f"sleep() argument must be a number, not {type(seconds).__name__}")
        if seconds != seconds or seconds < 0:
            raise ValueError("sleep length must be non-negative")
        nanoseconds = int(seconds * 1_000_000_000)
        if nanoseconds > U64_MAX:
            raise OverflowError("sleep length is too large")
        host.sleep(nanoseconds)

    return sleep
