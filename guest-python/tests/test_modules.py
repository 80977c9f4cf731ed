"""Allowed modules arrive as read-only views without private names, submodules or gadgets;
the runtime `__import__` keeps the allowlist; stdlib helpers imported from C still work."""

import types

import pytest
from fakehost import src

from flowbox_sdk import contract, modules


def test_every_allowed_module_imports_in_a_script(host):
    imports = "\n".join(f"import {name}" for name in contract.MODULES)
    assert host.run(imports + "\nreturn 1\n") == 1


def test_a_view_is_not_a_module_and_exposes_public_functions():
    view = modules.safe_import("statistics")
    assert not isinstance(view, types.ModuleType)
    assert view.mean([1, 2, 3]) == 2
    assert repr(view) == "<module 'statistics'>"


@pytest.mark.parametrize(
    "module, name",
    [
        ("statistics", "sys"),  # a module object
        ("json", "decoder"),  # a submodule
        ("random", "_os"),  # private
        ("string", "Formatter"),
        ("operator", "attrgetter"),
        ("operator", "methodcaller"),
        ("typing", "get_type_hints"),
        ("typing", "ForwardRef"),
        ("json", "no_such_name"),
    ],
)
def test_hidden_names(module, name):
    with pytest.raises(AttributeError, match=f"module '{module}' has no attribute '{name}'"):
        getattr(modules.safe_import(module), name)


def test_hidden_names_are_absent_in_scripts_too(host):
    failure = host.fail("import statistics\nreturn statistics.sys\n")
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "AttributeError", 2)


def test_views_are_read_only(host):
    failure = host.fail("import json\njson.dumps = len\nreturn 1\n")
    assert (failure.exception, failure.line) == ("AttributeError", 2)
    assert "read-only" in failure.message
    with pytest.raises(AttributeError, match="read-only"):
        del modules.safe_import("json").dumps


def test_from_import_goes_through_the_view(host):
    assert host.run("from json import dumps, loads\nreturn loads(dumps([1]))\n") == [1]


def test_from_import_of_a_submodule_is_refused(host):
    # IMPORT_FROM falls back to sys.modules["json.decoder"] only through the module's
    # __name__, which a view does not have.
    failure = host.fail("from json import decoder\nreturn 1\n")
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "ImportError", 1)


def test_time_sleep_in_the_view_is_read_live(monkeypatch):
    import time

    monkeypatch.setattr(time, "sleep", lambda seconds: "virtual")
    assert modules.safe_import("time").sleep(5) == "virtual"


def test_runtime_import_refuses_what_the_guard_would():
    with pytest.raises(ImportError, match="import of 'os' is not allowed") as raised:
        modules.safe_import("os")
    assert "Available modules:" in str(raised.value)
    with pytest.raises(ImportError, match="relative imports"):
        modules.safe_import("json", level=1)


def test_stdlib_helpers_imported_from_c_code_work(host):
    script = src(
        """
        import datetime, time
        when = datetime.datetime.strptime("2024-03-05", "%Y-%m-%d")
        return [when.isoformat(), time.strptime("2024", "%Y").tm_year]
        """
    )
    assert host.run(script) == ["2024-03-05T00:00:00", 2024]


def test_stdlib_helpers_are_not_handed_out():
    assert modules.safe_import("_strptime") is None


def test_safe_builtins_hold_no_escape_hatches():
    names = set(modules.safe_builtins(print))
    for dangerous in ("open", "eval", "exec", "compile", "setattr", "delattr", "vars", "globals",
                      "locals", "dir", "input", "breakpoint", "help", "exit"):  # fmt: skip
        assert dangerous not in names
    assert {"__build_class__", "__import__", "print", "Exception", "len"} <= names
    # Harmless inside the guest, so available (getattr and hasattr with a literal name only).
    assert {"BaseException", "memoryview", "bytearray", "complex", "getattr", "hasattr"} <= names
    assert modules.safe_builtins(print)["__import__"] is modules.safe_import
