"""The script contract agrees with what it describes: the SDK's primitives (names, signatures,
which ones are awaited) and the book's script-contract page, docs/script.md (its module list,
its primitives table, its list of refused builtins)."""

import ast
import inspect
import re
from pathlib import Path

import pytest
from fakehost import FakeHost

from flowbox_sdk import contract
from flowbox_sdk.primitives import make_primitives
from flowbox_sdk.scheduler import Scheduler

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_PAGE = ROOT / "docs" / "script.md"
PRIMITIVES = {primitive["name"]: primitive for primitive in contract.CONTRACT["primitives"]}


def test_the_contract_is_the_file_in_the_flowbox_crate():
    crate_contract = ROOT / "host" / "flowbox" / "contract"
    assert Path(contract.PATH).resolve() == crate_contract / "script.json"


def test_every_primitive_has_a_signature_and_a_one_line_description():
    for primitive in contract.CONTRACT["primitives"]:
        assert set(primitive) == {"name", "signature", "description"}, primitive
        assert primitive["signature"].removeprefix("await ").startswith(primitive["name"])
        assert primitive["description"] and "\n" not in primitive["description"]


# --- the SDK ----------------------------------------------------------------------------


def _sdk_primitives() -> dict:
    host = FakeHost()
    return make_primitives(host, Scheduler(host))


def test_the_contract_names_every_primitive_a_script_gets():
    # `print` is the builtin, replaced by one that logs; `args` is set by the runner.
    assert set(_sdk_primitives()) - {"print"} | {"args"} == set(contract.PRIMITIVE_NAMES)
    assert "print" in contract.AVAILABLE_BUILTINS


def test_every_primitive_is_in_a_guarded_script(host):
    names = ", ".join(contract.PRIMITIVE_NAMES)
    assert host.run(f"return len([{names}])\n") == len(contract.PRIMITIVE_NAMES)


def _parameters(signature: str) -> list:
    """(name, kind, default) of each parameter of a contract signature such as
    `await agent(prompt, *, schema=None)`."""
    arguments = ast.parse(f"def {signature.removeprefix('await ')}: pass").body[0].args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + [
        ast.literal_eval(default) for default in arguments.defaults
    ]
    parameters = [(a.arg, "positional", d) for a, d in zip(positional, defaults)]
    if arguments.vararg:
        parameters.append((arguments.vararg.arg, "*", None))
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        parameters.append(
            (argument.arg, "keyword", None if default is None else ast.literal_eval(default))
        )
    if arguments.kwarg:
        parameters.append((arguments.kwarg.arg, "**", None))
    return parameters


_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
    inspect.Parameter.VAR_POSITIONAL: "*",
    inspect.Parameter.KEYWORD_ONLY: "keyword",
    inspect.Parameter.VAR_KEYWORD: "**",
}


CALLABLE = [name for name, primitive in PRIMITIVES.items() if "(" in primitive["signature"]]


@pytest.mark.parametrize("name", CALLABLE)
def test_a_callable_primitive_has_the_contract_signature(name):
    function = _sdk_primitives()[name]
    signature = inspect.signature(function)
    actual = [
        (p.name, _KINDS[p.kind], None if p.default is inspect.Parameter.empty else p.default)
        for p in signature.parameters.values()
    ]
    assert actual == _parameters(PRIMITIVES[name]["signature"])
    # `await` in the contract exactly when the call returns an awaitable.
    returns = signature.return_annotation
    awaited = returns is not None and hasattr(returns, "__await__")
    assert PRIMITIVES[name]["signature"].startswith("await ") == awaited


def test_every_agent_option_is_explained_in_one_line():
    options = [
        name for name, kind, _ in _parameters(PRIMITIVES["agent"]["signature"]) if kind == "keyword"
    ]
    explained = contract.CONTRACT["agent_options"]
    assert list(explained) == options
    assert all(text and "\n" not in text for text in explained.values())


def test_a_primitive_without_parentheses_is_a_value():
    values = [name for name, primitive in PRIMITIVES.items() if "(" not in primitive["signature"]]
    assert values == ["args", "budget"]
    assert not callable(_sdk_primitives()["budget"])


# --- the script-contract page ------------------------------------------------------------


def _page() -> str:
    return CONTRACT_PAGE.read_text(encoding="utf-8")


def _primitives_table() -> list:
    """The code spans of the first column of the page's primitives table, row by row."""
    lines = _page().splitlines()
    start = lines.index("| primitive | what it does |")
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        first_column = line.split(" | ")[0].removeprefix("| ")
        rows.append(re.findall(r"`([^`]+)`", first_column))
    return rows


def test_the_page_module_list_is_the_contract():
    found = re.search(r"standard-library modules: `([^`]+)`", _page())
    assert found, "the script-contract page lists the modules a script may import"
    assert found.group(1).split() == list(contract.MODULES)


def test_the_page_primitives_table_is_the_contract():
    spans = [span for row in _primitives_table() for span in row]
    # Besides the primitives, the table shows `print(...)`, a builtin that logs.
    signatures = [span for span in spans if span != "print(...)"]
    assert signatures == [primitive["signature"] for primitive in contract.CONTRACT["primitives"]]


def test_the_page_lists_the_refused_builtins():
    found = re.search(r"builtins are refused[^`]*`([^`]+)`", _page())
    assert found, "the script-contract page lists the refused builtins"
    assert found.group(1).split() == list(contract.REFUSED_BUILTINS)


def test_the_page_names_the_contract_file():
    relative = Path(contract.PATH).resolve().relative_to(ROOT)
    assert f"`{relative.as_posix()}`" in _page()
