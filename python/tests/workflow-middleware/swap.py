"""Loaded first by workflow-middleware's own tests (measure.sh copies it in): the import
swapped, so `workflow_middleware` and its modules are flowbox.langchain's."""

import importlib
import sys

MODULES = ["config", "leaves", "runtime", "executor", "middleware", "prompts", "state"]

sys.modules["workflow_middleware"] = importlib.import_module("flowbox.langchain")
for name in MODULES:
    sys.modules[f"workflow_middleware.{name}"] = importlib.import_module(
        f"flowbox.langchain.{name}"
    )

# Internals of workflow-middleware with no equivalent in flowbox.langchain (its in-process
# primitives, builtins and exceptions), named here only so that the test modules importing them
# load and each test passes or fails on its own. Every test that uses one fails.


class NoEquivalent(Exception):
    """Stands for an internal exception class flowbox.langchain does not have."""


def no_equivalent(*args, **kwargs):
    raise NotImplementedError("workflow-middleware internal with no flowbox equivalent")


executor = sys.modules["workflow_middleware.executor"]
runtime = sys.modules["workflow_middleware.runtime"]
executor._ForbiddenCall = NoEquivalent
executor.build_reduced_builtins = no_equivalent
runtime.AgentCapExceeded = NoEquivalent
runtime.BudgetExceeded = NoEquivalent
runtime.Budget = no_equivalent
runtime._resolve_concurrency = importlib.import_module(
    "flowbox.langchain.config"
)._resolve_concurrency
