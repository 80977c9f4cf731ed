"""How runs of the middleware are bounded, and what its orchestrator is told."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from langchain_core.language_models import BaseChatModel

from .._types import Limits


@dataclass
class BudgetConfig:
    """The lifetime token ceiling of one run, over all its leaves (``None``: unlimited)."""

    total: int | None = None


@dataclass
class SandboxConfig:
    """Kept for compatibility: every script runs in flowbox's WebAssembly sandbox, whatever
    this says."""

    enabled: bool = False
    backend: Literal["none", "srt"] = "none"


@dataclass
class WorkflowConfig:
    """How runs are bounded and what the orchestrator is told.

    As in workflow-middleware: ``leaf_model`` (``None``: leaves use the orchestrator's model),
    ``max_concurrency`` (``None``: ``max(1, min(16, cpus - 2))``), ``max_agents_total``,
    ``budget``, ``inject_workflow_guidance``, ``include_patterns``, ``system_prompt`` (replaces
    the guidance text), ``leaf_prompt_addendum`` and ``sandbox``. flowbox adds ``limits`` (fuel,
    memory, deadline and the rest, :class:`flowbox.Limits`) and ``journal``: a SQLite file that
    makes runs durable, so a run of a thread id that was interrupted (its process killed, say)
    resumes without calling its finished leaves again.
    """

    leaf_model: str | BaseChatModel | None = None
    max_concurrency: int | None = None
    max_agents_total: int = 1000
    budget: BudgetConfig = None  # type: ignore[assignment]
    inject_workflow_guidance: bool = True
    include_patterns: bool = False
    system_prompt: str | None = None
    leaf_prompt_addendum: str | None = None
    sandbox: SandboxConfig = None  # type: ignore[assignment]
    limits: Limits | None = None
    journal: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = BudgetConfig()
        if self.sandbox is None:
            self.sandbox = SandboxConfig()

    def flowbox_limits(self) -> Limits:
        """The flowbox limits of a run under this configuration."""
        base = self.limits.to_dict() if self.limits is not None else {}
        base["max_concurrency"] = _resolve_concurrency(self)
        base["max_agents"] = self.max_agents_total
        if self.budget.total is not None:
            base["budget_tokens"] = self.budget.total
        return Limits(**base)


def _resolve_concurrency(config: WorkflowConfig) -> int:
    if config.max_concurrency is not None:
        return config.max_concurrency
    return max(1, min(16, (os.cpu_count() or 3) - 2))
