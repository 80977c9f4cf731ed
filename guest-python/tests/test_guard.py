"""The guard: each rule rejects with a message naming what and which line, before anything runs;
legitimate scripts pass; and the host's guard switch turns it (and the restrictions) off."""

import pytest
import re

from fakehost import FakeHost, src


def forbidden(host, source: str, line: int) -> str:
    failure = host.fail(source)
    assert failure.kind == "forbidden", failure.message
    assert failure.line == line
    # The line is its own field; messages stay free of it.
    assert not re.search(r"\bline \d", failure.message)
    # Nothing ran: the guard rejects before `started`.
    assert host.calls == []
    return failure.message


# --- imports -------------------------------------------------------------------------------


def test_disallowed_import_lists_modules_and_primitives(host):
    message = forbidden(host, "x = 1\n\nimport os\nreturn 1\n", 3)
    assert message.startswith("import of 'os' is not allowed in workflow scripts. ")
    assert "Available modules: base64, bisect, collections" in message
    assert "agent, parallel, pipeline, call_tool, phase, log, args, budget" in message


@pytest.mark.parametrize(
    "statement, named",
    [
        ("import os.path", "import of 'os.path'"),
        ("import json, subprocess", "import of 'subprocess'"),
        ("from os import path", "import of 'os'"),
        ("from collections.abc import Mapping", "import of 'collections.abc'"),
        ("from . import sibling", "relative imports"),
        ("from .json import x", "relative imports"),
        ("from json import *", "'from json import *' is not allowed"),
        ("from json import _default_encoder", "attribute '_default_encoder'"),
        ("import asyncio", "import of 'asyncio'"),
        ("import json as __j__", "name '__j__'"),
        ("from json import dumps as __d__", "name '__d__'"),
    ],
)
def test_rejected_imports(host, statement, named):
    assert named in forbidden(host, f"x = 1\n{statement}\nreturn 1\n", 2)


def test_allowed_imports_pass(host):
    script = src(
        """
        import json, math as m
        from collections import Counter
        from functools import reduce as fold
        return [json.dumps(m.floor(2.5)), Counter("aab")["a"], fold(lambda a, b: a + b, [1, 2])]
        """
    )
    assert host.run(script) == ["2", 2, 3]


# --- names and attributes ------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, named",
    [
        ("__builtins__", "name '__builtins__'"),
        ("__import__('os')", "name '__import__'"),
        ("__class__", "name '__class__'"),
        ("__flowbox_body__", "name '__flowbox_body__'"),
        ("x.__class__", "attribute '__class__'"),
        ("x._private", "attribute '_private'"),
        ("random._os", "attribute '_os'"),
        ("x.cr_frame", "attribute 'cr_frame'"),
        ("x.gi_frame", "attribute 'gi_frame'"),
        ("x.ag_await", "attribute 'ag_await'"),
        ("x.f_globals", "attribute 'f_globals'"),
        ("x.f_back", "attribute 'f_back'"),
        ("x.tb_frame", "attribute 'tb_frame'"),
        ("x.co_consts", "attribute 'co_consts'"),
        ("x.co_anything_new", "attribute 'co_anything_new'"),
        ("x.mro()", "attribute 'mro'"),
        ("x.with_traceback(None)", "attribute 'with_traceback'"),
        ("f'{x.__class__}'", "attribute '__class__'"),
    ],
)
def test_rejected_names_and_attributes(host, expression, named):
    assert named in forbidden(host, f"x = 1\ny = {expression}\nreturn 1\n", 2)


def test_frame_attribute_message_says_why(host):
    message = forbidden(host, "y = agent('x').cr_frame\nreturn 1\n", 1)
    assert "frames, code objects and tracebacks are not available" in message


def test_reading_dunder_name_is_allowed(host):
    assert host.run("return [type(1).__name__, len.__name__]\n") == ["int", "len"]


def test_writing_dunder_name_is_rejected(host):
    script = "def f():\n    pass\nf.__name__ = 'g'\nreturn 1\n"
    assert "attribute '__name__'" in forbidden(host, script, 3)


def test_dunder_name_stored(host):
    assert "name '__slots__'" in forbidden(host, "x = 1\n__slots__ = ()\nreturn 1\n", 2)


def test_dunder_names_in_every_binding_position(host):
    cases = [
        "def f(__a__):\n    return 1\n",
        "def __helper__():\n    return 1\n",
        "class __K__:\n    pass\n",
        "try:\n    pass\nexcept Exception as __e__:\n    pass\n",
        "def f():\n    global __g__\n",
        "match 1:\n    case __m__:\n        pass\n",
        "match [1]:\n    case [*__rest__]:\n        pass\n",
        "match {}:\n    case {**__rest__}:\n        pass\n",
        "f = lambda __a__: 1\n",
    ]
    for case in cases:
        failure = FakeHost().fail(case + "return 1\n")
        assert failure.kind == "forbidden", case
        assert "double underscores" in failure.message, case


def test_dunder_name_dunder_main_idiom_gets_a_hint(host):
    message = forbidden(
        host, "async def main():\n    return 1\nif __name__ == '__main__':\n    pass\n", 3
    )
    assert "main() is called for you" in message


def test_match_class_keyword_attributes_follow_the_attribute_rule(host):
    script = "match 1:\n    case int(_secret=1):\n        pass\nreturn 1\n"
    assert "attribute '_secret'" in forbidden(host, script, 2)


def test_match_is_allowed(host):
    script = src(
        """
        match {"kind": "a", "n": 2}:
            case {"kind": "a", "n": n}:
                return n
        """
    )
    assert host.run(script) == 2


# --- unavailable builtins ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, reason",
    [
        ("open", "workflow scripts have no files; use call_tool"),
        ("eval", "cannot run code from strings"),
        ("exec", "cannot run code from strings"),
        ("compile", "cannot run code from strings"),
        ("setattr", "assign attributes directly"),
        ("delattr", "delete attributes directly"),
        ("vars", "introspection is not available"),
        ("globals", "introspection is not available"),
        ("locals", "introspection is not available"),
        ("dir", "introspection is not available"),
        ("input", "no standard input"),
        ("breakpoint", "run unattended"),
        ("help", "run unattended"),
        ("copyright", "run unattended"),
        ("credits", "run unattended"),
        ("license", "run unattended"),
        ("exit", "to finish"),
        ("quit", "to finish"),
    ],
)
def test_unavailable_builtins(host, name, reason):
    message = forbidden(host, f"x = 1\ny = {name}\nreturn 1\n", 2)
    assert message.startswith(f"{name}() is not available: ")
    assert reason in message


def test_a_script_may_bind_an_unavailable_builtin_name_itself(host):
    script = src(
        """
        input = args["input"]

        def scale(open, compile=2):
            return open * compile

        return [input, scale(3)]
        """
    )
    assert host.run(script, {"input": "text"}) == ["text", 6]


# --- str.format ----------------------------------------------------------------------------


def test_format_on_a_literal_is_allowed(host):
    script = 'return ["{} {name}".format(1, name="x"), "{a[0]}".format_map({"a": [7]})]\n'
    assert host.run(script) == ["1 x", "7"]


@pytest.mark.parametrize(
    "expression, named",
    [
        ("'{0.real}'.format(1)", "the format field '{0.real}' reads an attribute"),
        ("'{x:{y.z}}'.format(x=1, y=2)", "the format field '{y.z}' reads an attribute"),
        ("'{a.b}'.format_map({})", "the format field '{a.b}' reads an attribute"),
        ("template.format(1)", ".format() is only allowed on a string literal"),
        ("str.format('{}', 1)", ".format() is only allowed on a string literal"),
        ("'{'.format(1)", "malformed format string"),
    ],
)
def test_format_rules(host, expression, named):
    message = forbidden(host, f"template = '{{}}'\ny = {expression}\nreturn y\n", 2)
    assert named in message
    if "reads an attribute" in named or "literal" in named:
        assert "use an f-string" in message


# --- classes -------------------------------------------------------------------------------


def test_classes_with_special_methods(host):
    script = src(
        """
        import dataclasses

        class Score:
            def __init__(self, value):
                self.value = value

            def __repr__(self):
                return f"Score({self.value})"

            def __eq__(self, other):
                return self.value == other.value

            def __lt__(self, other):
                return self.value < other.value

            def __hash__(self):
                return hash(self.value)

        class Failed(Exception):
            def __init__(self, why):
                super().__init__(f"failed: {why}")

        @dataclasses.dataclass
        class Item:
            name: str
            tags: list = dataclasses.field(default_factory=list)

            def __post_init__(self):
                self.name = self.name.upper()

        try:
            raise Failed("x")
        except Failed as error:
            message = str(error)
        best = max([Score(2), Score(5), Score(1)])
        return [repr(best), Score(1) == Score(1), message, dataclasses.asdict(Item("a"))]
        """
    )
    assert host.run(script) == ["Score(5)", True, "failed: x", {"name": "A", "tags": []}]


@pytest.mark.parametrize(
    "method", ["__getattr__", "__getattribute__", "__init_subclass__", "__del__"]
)
def test_other_special_methods_are_rejected(host, method):
    script = f"class K:\n    x = 1\n    def {method}(self, *a):\n        return 1\nreturn 1\n"
    message = forbidden(host, script, 3)
    assert f"defining '{method}' is not allowed" in message
    assert "__init__" in message  # the message lists what is allowed


def test_special_method_outside_a_class_is_rejected(host):
    assert "name '__init__'" in forbidden(host, "def __init__(self):\n    pass\nreturn 1\n", 1)


def test_super_of_a_non_special_attribute_is_rejected(host):
    script = "class K:\n    def f(self):\n        return super()._hidden()\nreturn 1\n"
    assert "attribute '_hidden'" in forbidden(host, script, 3)


# --- other constructs ----------------------------------------------------------------------


def test_except_star_is_rejected(host):
    script = "try:\n    pass\nexcept* ValueError:\n    pass\nreturn 1\n"
    assert "'except*' is not supported" in forbidden(host, script, 1)


def test_global_nonlocal_and_yield_are_fine(host):
    script = src(
        """
        counter = 0

        def bump():
            global counter
            counter += 1

        def make():
            total = 0

            def add(n):
                nonlocal total
                total += n
                return total

            return add

        def numbers():
            yield 1
            yield 2

        async def main():
            bump()
            add = make()
            add(2)
            return [counter, add(3), list(numbers())]
        """
    )
    assert host.run(script) == [1, 5, [1, 2]]


def test_first_violation_is_reported(host):
    message = forbidden(host, "import os\nx = y.__class__\nreturn 1\n", 1)
    assert "'os'" in message


# --- restricted builtins at run time -------------------------------------------------------


def test_restricted_builtins_lack_dangerous_names(host):
    # The guard refuses `open`, but not a script's own variable of that name; once the variable
    # is gone, the name falls through to the builtins, which shows the script runs with the
    # reduced builtins, not Python's.
    failure = host.fail("open = None\ndel open\n\ndef main():\n    return open\n")
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "NameError", 5)


def test_common_exceptions_are_available(host):
    script = src(
        """
        caught = []
        for error in [ValueError, TypeError, KeyError, IndexError, RuntimeError, ZeroDivisionError,
                      AttributeError, ArithmeticError, LookupError, AssertionError,
                      NotImplementedError, MemoryError, RecursionError, TimeoutError,
                      StopIteration, AgentError, BudgetExceeded, AgentCapExceeded, ToolError]:
            try:
                raise error("x")
            except Exception as e:
                caught.append(type(e).__name__)
        return caught
        """
    )
    assert len(host.run(script)) == 19


# --- the guard switch ----------------------------------------------------------------------


def test_guard_off_skips_the_guard_and_gives_real_builtins_and_imports():
    host = FakeHost(guard=False)
    script = src(
        """
        import os.path
        x = agent("never awaited")
        kind = getattr(x, "__class__").__name__
        return [os.path.join("a", "b"), kind, type(__builtins__).__name__]
        """
    )
    assert host.run(script) == ["a/b", "AgentCall", "dict"]


def test_guard_off_keeps_everything_else():
    host = FakeHost(guard=False)
    assert host.run("print('hi')\nreturn [true, await agent('x')]\n") == [True, "echo: x"]
    assert host.logs == ["hi"]
