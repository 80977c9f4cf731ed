"""The exceptions flowbox raises, one class per kind of run error.

Every error a run ends with is a :class:`FlowboxError`, in one of four families that say what to
do about it (the Rust crate's ``RunErrorClass``):

* :class:`Rejected` -- the input was refused before anything ran: fix it and run again;
* :class:`LimitExceeded` -- a resource limit was breached (fuel, memory, time, stack, output);
* :class:`ScriptFailed` -- the script ran and failed (an uncaught exception, a result that is
  not JSON), with its ``line`` and a ``hint``;
* :class:`MachineryError` -- flowbox's own machinery failed; the thread stays open to resume.
"""

from __future__ import annotations

from typing import Any


class FlowboxError(Exception):
    """A run error: its stable ``kind`` (such as ``"uncaught"`` or ``"out_of_fuel"``), its
    message, the script ``line`` when known, the Python ``exception`` type of an uncaught
    exception, and a ``hint`` on what to do about it."""

    kind: str
    message: str
    line: int | None
    exception: str | None
    hint: str | None
    summary: Any
    plan: Any

    def __init__(
        self,
        message: str,
        *,
        kind: str = "host_failure",
        line: int | None = None,
        exception: str | None = None,
        hint: str | None = None,
        summary: Any = None,
        plan: Any = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.line = line
        self.exception = exception
        self.hint = hint
        self.summary = summary
        self.plan = plan

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        return f"{self.message}{where}"


class SetupError(FlowboxError, ValueError):
    """The runtime could not be built: a limit out of range, a journal that does not open, a
    scripted backend's file that does not read, a tool schema that is not a JSON Schema."""


class Rejected(FlowboxError):
    """The input was refused before anything ran: fix it and run again."""


class InvalidArgs(Rejected, ValueError):
    """The run's ``args`` (or another value handed to flowbox) are not JSON."""


class InvalidLimits(Rejected, ValueError):
    """A limit is out of its range."""


class ScriptRejected(Rejected):
    """The script does not parse, its ``meta`` is invalid, the guard refused a construct, it
    has no entry point, or it is too large."""


class UnknownThread(Rejected, LookupError):
    """No journaled thread has this id."""


class ThreadInUse(Rejected):
    """Another run holds this thread."""


class GateRefused(Rejected):
    """The pre-launch gate refused the run; ``plan`` is what it measured. Nothing ran."""


class LimitExceeded(FlowboxError):
    """A resource limit was breached."""


class OutOfFuel(LimitExceeded):
    """The script used all its fuel (instructions)."""


class OutOfMemory(LimitExceeded, MemoryError):
    """The script went past its memory cap."""


class RunTimeout(LimitExceeded, TimeoutError):
    """The run went past its deadline."""


class StackOverflow(LimitExceeded, RecursionError):
    """The script recursed too deep."""


class OutputTooLarge(LimitExceeded):
    """The script's output (logs, result) went past its cap."""


class ScriptFailed(FlowboxError):
    """The script ran and failed: an uncaught exception (``exception`` names its type) or a
    result that is not JSON."""


class MachineryError(FlowboxError):
    """flowbox's own machinery failed (the journal, a divergence on replay, the guest, the
    host): not the script's fault, and the thread stays open to resume."""


class JournalError(MachineryError):
    """The journal could not be read or written."""


class Divergence(MachineryError):
    """A resumed run took another path than its journal recorded."""


class LeafError(Exception):
    """Raise it from a Python leaf or tool to fail the call with this message; ``retryable``
    says whether calling again may succeed (the script sees it as ``AgentError``'s
    ``retryable``). Any other exception fails the call as not retryable."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


_BY_KIND: dict[str, type[FlowboxError]] = {
    "script_too_large": ScriptRejected,
    "invalid_args": InvalidArgs,
    "invalid_thread_id": Rejected,
    "invalid_limits": InvalidLimits,
    "syntax": ScriptRejected,
    "invalid_meta": ScriptRejected,
    "forbidden": ScriptRejected,
    "no_entry_point": ScriptRejected,
    "memory_cap_too_small": InvalidLimits,
    "unknown_thread": UnknownThread,
    "thread_in_use": ThreadInUse,
    "gate_refused": GateRefused,
    "uncaught": ScriptFailed,
    "invalid_result": ScriptFailed,
    "out_of_fuel": OutOfFuel,
    "out_of_memory": OutOfMemory,
    "timeout": RunTimeout,
    "stack_overflow": StackOverflow,
    "output_too_large": OutputTooLarge,
    "result_too_large": OutputTooLarge,
    "divergence": Divergence,
    "journal_failure": JournalError,
    "guest_failure": MachineryError,
    "host_failure": MachineryError,
}


def from_json(error: dict[str, Any], summary: Any = None) -> FlowboxError:
    """The exception for a run error as flowbox writes it in JSON."""
    kind = error["kind"]
    cls = _BY_KIND.get(kind, MachineryError)
    return cls(
        error["message"],
        kind=kind,
        line=error.get("line"),
        exception=error.get("exception"),
        hint=error.get("hint"),
        summary=summary,
        plan=error.get("plan"),
    )
