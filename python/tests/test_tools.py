"""Tools written in Python: their schemas, their calls from scripts, their failures."""

import asyncio
from typing import Literal, Optional

import pytest

import flowbox


@flowbox.tool
def add(a: int, b: int = 0) -> int:
    """Adds two integers."""
    return a + b


@flowbox.tool(read_only=True, result_schema={"type": "array", "items": {"type": "string"}})
async def lookup(
    keys: list[str], mode: Literal["upper", "lower"] = "upper", note: Optional[str] = None
):
    """Looks keys up."""
    await asyncio.sleep(0)
    return [key.upper() if mode == "upper" else key.lower() for key in keys]


def test_a_tools_schema_comes_from_its_hints():
    assert add.name == "add" and add.description == "Adds two integers."
    assert add.parameters == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "additionalProperties": False,
        "required": ["a"],
    }
    assert lookup.parameters["properties"] == {
        "keys": {"type": "array", "items": {"type": "string"}},
        "mode": {"enum": ["upper", "lower"]},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    }
    assert add(2, 3) == 5


def test_hints_without_a_json_schema_are_refused():
    with pytest.raises(TypeError, match="no JSON Schema for the type"):

        @flowbox.tool
        def bad(x: complex):
            return x

    with pytest.raises(TypeError, match=r"\*args has no JSON Schema"):

        @flowbox.tool
        def variadic(*args: int):
            return args

    with pytest.raises(TypeError, match="keys are str"):

        @flowbox.tool
        def keyed(x: dict[int, str]):
            return x


def test_scripts_call_sync_and_async_tools():
    rt = flowbox.Runtime("fake", tools=[add, lookup])
    script = (
        "s = await call_tool('add', a=2**80, b=1)\n"
        "k = await call_tool('lookup', keys=['a', 'B'], mode='lower')\n"
        "return [s, k]"
    )
    outcome = rt.run_sync(script)
    assert outcome.unwrap() == [2**80 + 1, ["a", "b"]]
    assert outcome.summary.tools_called == 2


def test_tool_failures_reach_the_script_as_tool_errors():
    @flowbox.tool
    def boom(x: int):
        raise ValueError(f"bad {x}")

    @flowbox.tool
    def not_json(x: int):
        return {"s": {1, 2}}

    rt = flowbox.Runtime("fake", tools=[add, boom, not_json])

    def message(call):
        script = (
            f"try:\n    await {call}\nexcept ToolError as e:\n    return str(e)\nreturn 'no error'"
        )
        return rt.run_sync(script).unwrap()

    assert "ValueError: bad 3" in message("call_tool('boom', x=3)")
    assert "the result of tool not_json['s'] is a set" in message("call_tool('not_json', x=1)")
    assert "invalid arguments for add" in message("call_tool('add', a='two')")
    assert "invalid arguments for add" in message("call_tool('add', a=1, c=2)")


def test_a_tool_only_for_leaves_is_not_callable_from_scripts():
    @flowbox.tool(script=False)
    def private(x: int):
        return x

    rt = flowbox.Runtime("fake", tools=[private])
    script = "try:\n    await call_tool('private', x=1)\nexcept ToolError as e:\n    return str(e)"
    assert "no tool named" in rt.run_sync(script).unwrap()


def test_two_tools_with_one_name_are_refused():
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        flowbox.Runtime("fake", tools=[add, add])


def test_an_invalid_schema_is_a_setup_error():
    broken = flowbox.tool(lambda x: x, name="broken", parameters={"type": "no-such-type"})
    with pytest.raises(flowbox.errors.SetupError, match="broken"):
        flowbox.Runtime("fake", tools=[broken])
