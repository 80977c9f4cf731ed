"""The host protocol: what the SDK asks of the flowbox host, and the records it passes.

`app.py` implements `Host` over the generated WIT bindings; the tests implement it with a fake.
Nothing else in the SDK knows the bindings exist. The errors a host raises (`CallFailed`) are
in `errors`.
"""

from typing import NamedTuple, Protocol

# Where a call sits in the script tree: one position per enclosing group, outermost first,
# each (group, index, size, stage): stage (from 1) is the pipeline stage the item was in, None
# for a parallel branch, so it also tells the group's kind. The WIT `position` is the same
# tuple, so a path crosses the boundary as it is.
Path = list[tuple[int, int, int, int | None]]


class Settings(NamedTuple):
    """How the host wants a run to behave: the WIT `run` export's `guard` and
    `recursion-limit`."""

    guard: bool
    recursion_limit: int


# The host's defaults, for runs the SDK's own callers (its warm-up, its tests) start.
DEFAULT_SETTINGS = Settings(True, 1000)


class BudgetState(NamedTuple):
    total: int | None
    spent: int
    total_usd: float | None = None
    spent_usd: float | None = None


class Completion(NamedTuple):
    """One finished call: its handle, its reply, None, and whether the reply is text (a text
    reply as it is) rather than JSON text; else its handle, "", why it failed, and False. The
    WIT `completion`, with the failure as a `CallFailed`. The guest's host hands completions on
    as plain tuples (a batch in which no call failed as the bindings made it), so the SDK reads
    a completion by index, never by name; this class names the fields for the hosts of tests."""

    handle: int
    reply: str
    failure: "CallFailed | None"
    text: bool = False


# The primitive a group (and a failed branch) belongs to; the WIT `group-kind` cases.
PARALLEL = "parallel"
PIPELINE = "pipeline"


class BranchFailure(NamedTuple):
    """A `parallel` branch or `pipeline` item that raised and so became None; mirrors the WIT
    `branch-failure` record."""

    group: str  # PARALLEL or PIPELINE
    index: int
    stage: int | None  # the pipeline stage that raised, from 1
    exception: str
    message: str
    line: int | None


class AgentOptions(NamedTuple):
    """The options of one `agent(...)` call besides its prompt; mirrors the WIT `agent-options`
    record, field for field and in its order. A call that sets none passes None instead."""

    schema: str | None = None  # JSON text
    agent_type: str | None = None
    label: str | None = None
    instruction: str | None = None
    model: str | None = None
    tools: list[str] | None = None
    instance_id: str | None = None


class Host(Protocol):
    def started(self, meta_json: str | None) -> None: ...

    def start_agent(self, prompt: str, options: AgentOptions | None, path: Path) -> int:
        """Starts one `agent(...)` call: its prompt as JSON text, and its options, or None when
        the call set none. Returns the call's handle; raises `CallFailed` when the host refuses
        it."""

    def start_tool(self, name: str, arguments_json: str, path: Path) -> int:
        """Returns the call's handle; raises `CallFailed` when the host refuses it."""

    def await_next(self) -> list[Completion]:
        """Blocks until a started call finished; raises `CallFailed` when none is pending."""

    def phase(self, title: str) -> None: ...

    def log(self, message: str) -> None: ...

    def branch_failed(self, failure: BranchFailure) -> None:
        """Reports a branch that raised and became None, for the run's summary."""

    def placeholder_path(self, handle: int, constructs: list[int]) -> None:
        """In a plan's run only: the leaf `handle` started in branches of the reply-dependent
        constructs at these lines, which the plan entered on placeholder replies."""

    def budget(self) -> BudgetState: ...

    def sleep(self, nanoseconds: int) -> None: ...


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
