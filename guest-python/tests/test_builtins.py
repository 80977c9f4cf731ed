"""The builtins of a guarded script, as the script contract says: every builtin name is either
there when the script runs or refused by the guard, before the run, with the line and the
contract's reason — never a NameError later. Harmless Python a model writes without thinking
runs."""

import builtins
import keyword

import pytest
from fakehost import src

from flowbox_sdk import contract, modules


def _is_exception_class(value) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


@pytest.mark.parametrize("name", [name for name in dir(builtins) if not keyword.iskeyword(name)])
def test_every_builtin_is_available_or_refused_with_a_reason(host, name):
    script = f"value = {name}\nreturn 1\n"
    available = name in contract.AVAILABLE_BUILTINS or (
        contract.ALL_EXCEPTION_CLASSES and _is_exception_class(getattr(builtins, name))
    )
    if available:
        assert host.run(script) == 1
        if name != "print":  # the run's own, which logs
            assert modules.safe_builtins(print)[name] is getattr(builtins, name)
        return
    failure = host.fail(script)
    assert (failure.kind, failure.line) == ("forbidden", 1), failure.message
    assert failure.exception is None
    if name in contract.REFUSED_BUILTINS:
        assert failure.message == f"{name}() is not available: {contract.REFUSED_BUILTINS[name]}"
    elif name in contract.LITERAL_ATTRIBUTE_NAME:
        reason = contract.LITERAL_ATTRIBUTE_NAME[name]
        assert failure.message == f"{name} can only be called directly: {reason}"
    else:
        # Python's internals (__import__, __build_class__, __spec__, ...) under the guard's
        # rule for dunder names; anything else is a builtin the contract does not classify.
        assert _is_dunder(name), f"the script contract does not classify the builtin {name!r}"
        assert "double underscores" in failure.message or "'__name__'" in failure.message


def test_the_contract_names_only_real_builtins():
    for name in (
        *contract.AVAILABLE_BUILTINS,
        *contract.LITERAL_ATTRIBUTE_NAME,
        *contract.REFUSED_BUILTINS,
    ):
        # copyright, credits, license, help, exit and quit come with `site`, which the
        # native interpreter imports.
        assert hasattr(builtins, name), name
        assert not _is_exception_class(getattr(builtins, name)), name


# --- what a model writes without thinking ------------------------------------------------


@pytest.mark.parametrize(
    "snippet, result",
    [
        (
            """
            try:
                b"\\xff".decode("utf-8")
            except UnicodeDecodeError as error:
                return error.reason
            """,
            "invalid start byte",
        ),
        (
            """
            try:
                raise KeyboardInterrupt()
            except BaseException as error:
                return type(error).__name__
            """,
            "KeyboardInterrupt",
        ),
        (
            """
            try:
                raise ConnectionResetError("reset")
            except (ConnectionError, OSError) as error:
                return [str(error), isinstance(error, OSError)]
            """,
            ["reset", True],
        ),
        ("z = complex(1, 2)\nreturn [z.real, z.imag, abs(complex(3, 4))]", [1.0, 2.0, 5.0]),
        ("data = bytearray(b'x')\ndata += b'y'\nreturn data.decode()", "xy"),
        ("return memoryview(b'abc')[1:].tobytes().decode()", "bc"),
        (
            """
            async def numbers():
                for number in [1, 2, 3]:
                    yield number

            it = aiter(numbers())
            first = await anext(it)
            return [first, await anext(it), await anext(it), await anext(it, "done")]
            """,
            [1, 2, 3, "done"],
        ),
        (
            """
            reply = await agent("x", schema={"type": "object"})
            return [hasattr(reply, "get"), hasattr(reply, "missing"), getattr(reply, "nope", 0)]
            """,
            [True, False, 0],
        ),
    ],
)
def test_harmless_python_runs(host, snippet, result):
    assert host.run(src(snippet)) == result


def test_an_async_generator_may_await_leaves(host):
    script = src(
        """
        async def replies(prompts):
            for prompt in prompts:
                yield await agent(prompt)

        it = replies(["a", "b"])
        return [await anext(it), await anext(it), await anext(it, None)]
        """
    )
    assert host.run(script) == ["echo: a", "echo: b", None]


# --- getattr and hasattr: a literal attribute name, held to the rules of `obj.name` -------


@pytest.mark.parametrize(
    "call, result",
    [
        ('getattr(budget, "total")', None),
        ('getattr(args, "missing", "fallback")', "fallback"),
        ('hasattr(budget, "remaining")', True),
        ('hasattr(args, "keys")', True),
        ('getattr(type(1), "__name__")', "int"),
    ],
)
def test_getattr_and_hasattr_with_a_literal_name(host, call, result):
    assert host.run(f"return {call}\n") == result


@pytest.mark.parametrize(
    "call, message",
    [
        ('getattr(agent, "__glo" + "bals__")', "getattr() with a computed attribute name"),
        ("hasattr(args, args['name'])", "hasattr() with a computed attribute name"),
        ("getattr(*pair)", "getattr() with * arguments"),
        ('getattr(agent, "__globals__")', "attribute '__globals__' is not accessible"),
        ('hasattr(budget, "_host")', "attribute '_host' is not accessible"),
        ('getattr(agent("x"), "cr_frame")', "attribute 'cr_frame' is not accessible"),
        ("list(map(getattr, [1], ['real']))", "getattr can only be called directly"),
        ("[hasattr][0](1, 'real')", "hasattr can only be called directly"),
    ],
)
def test_getattr_and_hasattr_refuse_what_attributes_refuse(host, call, message):
    failure = host.fail(f"pair = [1, 'real']\nreturn {call}\n")
    assert (failure.kind, failure.line) == ("forbidden", 2)
    assert message in failure.message, failure.message
    assert "literal" in failure.message or "not accessible" in failure.message


def test_getattr_checks_its_arguments_too(host):
    failure = host.fail('return getattr(args, "x", agent.__globals__)\n')
    assert (failure.kind, failure.line) == ("forbidden", 1)
    assert "'__globals__'" in failure.message


def test_a_script_may_define_its_own_getattr(host):
    script = src(
        """
        def getattr(mapping, key, default=None):
            return mapping.get(key, default)

        name = "k"
        return getattr(args, name)
        """
    )
    assert host.run(script, {"k": 7}) == 7


def test_getattr_with_too_few_arguments_is_a_type_error_at_run_time(host):
    failure = host.fail("return getattr(args)\n")
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "TypeError", 1)
