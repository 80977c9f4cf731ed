"""Host tools written in Python: ``@flowbox.tool``."""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Literal, Union, get_args, get_origin


@dataclass(frozen=True)
class Tool:
    """A function a script may call with ``call_tool(name, args)`` (``script``) and leaf
    agents may call in their own loop (``leaves``). Its arguments are checked against
    ``parameters``, a JSON Schema of an object, before it runs; it returns any JSON value.
    ``read_only`` says a call changes nothing and gives the same answer for the same
    arguments while a run lasts (a plan calls it for real); ``result_schema`` is the shape of
    its result, which a plan uses for the calls it does not make."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    read_only: bool = False
    result_schema: dict[str, Any] | None = None
    script: bool = True
    leaves: bool = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def config(self) -> dict[str, Any]:
        """How the native runtime is told about it."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "result_schema": self.result_schema,
            "read_only": self.read_only,
            "script": self.script,
            "leaves": self.leaves,
        }


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    read_only: bool = False,
    result_schema: dict[str, Any] | None = None,
    script: bool = True,
    leaves: bool = True,
) -> Any:
    """Makes a function (plain or ``async``) a :class:`Tool`: ``@flowbox.tool`` or
    ``@flowbox.tool(name=..., read_only=True, ...)``. Its name is the function's, its
    description the docstring's, and its argument schema comes from the type hints
    (``str``, ``int``, ``float``, ``bool``, ``None``, ``list[...]``, ``dict[str, ...]``,
    ``Literal[...]``, ``Optional[...]``/unions; a parameter with a default is optional),
    unless given as ``parameters``."""

    def make(function: Callable[..., Any]) -> Tool:
        return Tool(
            name=name or function.__name__,
            description=description or inspect.getdoc(function) or function.__name__,
            parameters=parameters if parameters is not None else schema_of(function),
            function=function,
            read_only=read_only,
            result_schema=result_schema,
            script=script,
            leaves=leaves,
        )

    return make(function) if function is not None else make


def schema_of(function: Callable[..., Any]) -> dict[str, Any]:
    """The JSON Schema of a function's keyword arguments, from its type hints."""
    signature = inspect.signature(function)
    hints = typing.get_type_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(
                f"tool {function.__name__}: *{parameter.name} has no JSON Schema; "
                "name every argument, or pass parameters="
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"tool {function.__name__}: {parameter.name} is positional-only, but tools "
                "are called with keyword arguments"
            )
        hint = hints.get(parameter.name, Any)
        properties[parameter.name] = _schema(hint, f"{function.__name__}({parameter.name})")
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema(hint: Any, where: str) -> dict[str, Any]:
    if hint is Any:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin = get_origin(hint)
    args = get_args(hint)
    if hint in (list, tuple) or origin in (list, tuple, typing.Sequence):
        item = args[0] if args else Any
        return {"type": "array", "items": _schema(item, where)}
    if hint is dict or origin is dict:
        if args and args[0] is not str:
            raise TypeError(f"tool {where}: JSON object keys are str, not {args[0]!r}")
        value = args[1] if args else Any
        return {"type": "object", "additionalProperties": _schema(value, where)}
    if origin is Literal:
        return {"enum": list(args)}
    if origin is Union or origin is types.UnionType:
        return {"anyOf": [_schema(arg, where) for arg in args]}
    raise TypeError(
        f"tool {where}: no JSON Schema for the type {hint!r}; annotate it with JSON types or "
        "pass parameters="
    )
