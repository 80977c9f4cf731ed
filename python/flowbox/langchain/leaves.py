"""What answers a script's leaves: the protocol, an offline fake, and create_agent leaves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool

from .prompts import LEAF_PROMPT_ADDENDUM


@dataclass
class LeafResult:
    """A leaf's answer: its text, its structured value (when asked with a schema), and the
    tokens it used."""

    text: str
    structured: Any | None = None
    tokens: int = 0


@runtime_checkable
class LeafBackend(Protocol):
    """What answers a script's ``agent(...)`` calls."""

    async def run(
        self,
        prompt: str,
        *,
        schema: Any | None = None,
        agent_type: str | None = None,
        label: str | None = None,
    ) -> LeafResult: ...


class FakeLeafBackend:
    """Offline, deterministic leaves: the text is ``responder(prompt)`` (``"[leaf] PROMPT"``
    without one), the tokens are the prompt's length, and a schema gets a placeholder value
    (a JSON Schema's required properties, or a pydantic model's required fields)."""

    def __init__(self, responder: Callable[[str], str] | None = None) -> None:
        self._responder = responder

    async def run(
        self,
        prompt: str,
        *,
        schema: Any | None = None,
        agent_type: str | None = None,
        label: str | None = None,
    ) -> LeafResult:
        text = self._responder(prompt) if self._responder is not None else f"[leaf] {prompt}"
        structured = self._fill_schema(schema) if schema is not None else None
        return LeafResult(text=text, structured=structured, tokens=len(prompt))

    @staticmethod
    def _fill_schema(schema: Any) -> Any:
        fields = getattr(schema, "model_fields", None)
        if fields is not None:
            values = {
                name: FakeLeafBackend._placeholder_for(info.annotation, name)
                for name, info in fields.items()
                if info.is_required()
            }
            return schema(**values)
        if isinstance(schema, dict):
            return _json_placeholder(schema, "value")
        return {}

    @staticmethod
    def _placeholder_for(annotation: Any, name: str) -> Any:
        origin = getattr(annotation, "__origin__", annotation)
        if origin is bool:
            return False
        if origin is int:
            return 0
        if origin is float:
            return 0.0
        if origin in (list, tuple, set):
            return []
        if origin is dict:
            return {}
        return name


def _json_placeholder(schema: dict[str, Any], name: str) -> Any:
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0] if kind else None
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        return {
            key: _json_placeholder(properties.get(key, {}), key)
            for key in schema.get("required", [])
        }
    placeholders: dict[Any, Any] = {
        "boolean": False,
        "integer": 0,
        "number": 0.0,
        "array": [],
        "null": None,
    }
    return placeholders.get(kind, name)


class LangChainLeafBackend:
    """Real leaves: each call is a fresh ``create_agent`` agent on ``model`` with ``tools``
    and ``system_prompt`` (plus the leaf addendum), or on the model, tools and prompt of the
    named subagent its ``agent_type`` names; a schema becomes the agent's
    ``response_format``. Its tokens are the output tokens its model reported."""

    def __init__(
        self,
        *,
        model: str | BaseChatModel,
        tools: list[BaseTool | dict[str, Any]],
        system_prompt: str | None = None,
        named_subagents: dict[str, dict[str, Any]] | None = None,
        leaf_prompt_addendum: str = LEAF_PROMPT_ADDENDUM,
    ) -> None:
        self._model = model
        self._tools = list(tools)
        self._system_prompt = system_prompt
        self._named_subagents = named_subagents or {}
        self._leaf_prompt_addendum = leaf_prompt_addendum

    def _build_leaf_runnable(self, agent_type: str | None, schema: Any | None) -> Any:
        spec = self._named_subagents.get(agent_type or "", {})
        model = spec.get("model", self._model)
        tools = spec.get("tools", self._tools)
        base = spec.get("system_prompt", self._system_prompt)
        prompt = f"{base}\n\n{self._leaf_prompt_addendum}" if base else self._leaf_prompt_addendum
        options: dict[str, Any] = {"tools": tools, "system_prompt": prompt}
        if schema is not None:
            options["response_format"] = schema
        return create_agent(model, **options)

    async def run(
        self,
        prompt: str,
        *,
        schema: Any | None = None,
        agent_type: str | None = None,
        label: str | None = None,
    ) -> LeafResult:
        runnable = self._build_leaf_runnable(agent_type, schema)
        result = await runnable.ainvoke({"messages": [HumanMessage(content=prompt)]})
        messages = result.get("messages", [])
        text = messages[-1].text.rstrip() if messages else ""
        structured = result.get("structured_response") if schema is not None else None
        return LeafResult(text=text, structured=structured, tokens=_aggregate_tokens(messages))


def _aggregate_tokens(messages: list[Any]) -> int:
    total = 0
    for message in messages:
        if isinstance(message, AIMessage) and message.usage_metadata:
            usage = message.usage_metadata
            total += usage.get("output_tokens") or usage.get("total_tokens", 0)
    return total
