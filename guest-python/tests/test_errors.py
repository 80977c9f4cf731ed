"""Uncaught errors: kind, exception type, message and the script's own line in both forms;
out-of-memory; recursion; and the run's recursion limit."""

import sys

from fakehost import FakeHost, src


def test_uncaught_in_main_form_reports_the_innermost_script_line(host):
    script = src(
        """
        meta = {"name": "n", "description": "d"}

        def parse(text):
            return int(text)

        async def main():
            reply = await agent("x")
            return parse(reply)
        """
    )
    failure = host.fail(script)
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "ValueError", 4)
    assert failure.message == "invalid literal for int() with base 10: 'echo: x'"


def test_uncaught_in_direct_body_reports_the_script_line(host):
    script = src(
        """
        data = await agent("x")

        items = {"a": 1}
        return items[data]
        """
    )
    failure = host.fail(script)
    assert (failure.kind, failure.exception, failure.line, failure.message) == (
        "uncaught", "KeyError", 4, "'echo: x'",
    )  # fmt: skip


def test_uncaught_in_module_level_statements(host):
    failure = host.fail("x = 1\ny = x / 0\nasync def main():\n    return 1\n")
    assert (failure.exception, failure.line) == ("ZeroDivisionError", 2)
    assert host.named("started") == [(None,)]


def test_uncaught_inside_a_nested_task_is_the_task_line(host):
    script = src(
        """
        async def worker():
            await agent("x")
            raise RuntimeError("from the branch")

        async def main():
            try:
                await parallel([worker])
            finally:
                pass
            raise ValueError("after")
        """
    )
    failure = host.fail(script)
    assert (failure.exception, failure.line, failure.message) == ("ValueError", 10, "after")
    assert host.logs == ["parallel item 0 failed: RuntimeError: from the branch"]


def test_script_defined_exception(host):
    script = "class Stop(Exception):\n    pass\nraise Stop('halt')\nreturn 1\n"
    failure = host.fail(script)
    assert (failure.kind, failure.exception, failure.message, failure.line) == (
        "uncaught", "Stop", "halt", 3,
    )  # fmt: skip


def test_unprintable_exception_message(host):
    script = (
        src(
            """
        class Odd(Exception):
            def __str__(self):
                raise ValueError("no")

        raise Odd()
        """
        )
        + "return 1\n"
    )
    failure = host.fail(script)
    assert (failure.exception, failure.message, failure.line) == ("Odd", "", 5)


def test_memory_error_is_out_of_memory(host):
    failure = host.fail("x = 1\nraise MemoryError('too big')\nreturn 1\n")
    assert (failure.kind, failure.exception, failure.line) == ("out-of-memory", "MemoryError", 2)
    assert failure.message == "the script ran out of memory: too big"


def test_caught_memory_error_is_the_script_s_business(host):
    assert host.run("try:\n    raise MemoryError()\nexcept MemoryError:\n    return 'ok'\n") == "ok"


# What the 32-bit guest raises for `'a' * 10**10`, before asking for any memory.
SIZE_OVERFLOW = "raise OverflowError(\"cannot fit 'int' into an index-sized integer\")"


def test_a_size_beyond_the_address_space_is_a_memory_error(host):
    for handler in ("MemoryError", "(ValueError, MemoryError)", "MemoryError as e"):
        script = f"try:\n    {SIZE_OVERFLOW}\nexcept {handler}:\n    return 'caught'\n"
        assert host.run(script) == "caught", handler
    failure = host.fail(f"x = 1\n{SIZE_OVERFLOW}\nreturn 1\n")
    assert (failure.kind, failure.exception, failure.line) == ("out-of-memory", "MemoryError", 2)
    assert "2 GiB address space" in failure.message
    failure = host.fail('raise OverflowError("repeated string is too long")\nreturn 1\n')
    assert (failure.kind, failure.exception) == ("out-of-memory", "MemoryError")
    # Any other overflow is an ordinary uncaught error...
    failure = host.fail("import math\nreturn math.exp(1000)\n")
    assert (failure.kind, failure.exception) == ("uncaught", "OverflowError")
    # ... which a MemoryError handler does not take from the handler meant for it.
    script = (
        "import math\ntry:\n    math.exp(1000)\nexcept MemoryError:\n    return 'memory'\n"
        "except OverflowError:\n    return 'overflow'\n"
    )
    assert host.run(script) == "overflow"


def test_a_handler_spelt_outside_ascii_also_catches_a_size_overflow(host):
    # The parser folds "\uff2demoryError" (a fullwidth M) into the name MemoryError, so the text
    # does not hold the word, yet the handler is one of MemoryError.
    script = f"try:\n    {SIZE_OVERFLOW}\nexcept \uff2demoryError:\n    return 'caught'\n"
    assert "MemoryError" not in script
    assert host.run(script) == "caught"


def test_recursion_error_stays_uncaught():
    # Measured natively: with the host's limit at 200 an unbounded recursion raises
    # RecursionError at the script's recursive call, and the run reports it as uncaught.
    host = FakeHost(recursion_limit=200)
    failure = host.fail("def down(n):\n    return down(n + 1)\nreturn down(0)\n")
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "RecursionError", 2)
    assert "maximum recursion depth exceeded" in failure.message


def test_recursion_within_the_limit_works():
    host = FakeHost(recursion_limit=300)
    script = "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\nreturn depth(250)\n"
    assert host.run(script) == 250


def test_recursion_limit_applies_inside_tasks():
    host = FakeHost(recursion_limit=200)
    script = src(
        """
        def down(n):
            return down(n + 1)

        async def branch():
            return down(0)

        results = await parallel([branch])
        return results
        """
    )
    assert host.run(script) == [None]
    assert host.logs[0].startswith("parallel item 0 failed: RecursionError")


def test_recursion_limit_is_restored_after_the_run():
    before = sys.getrecursionlimit()
    FakeHost(recursion_limit=150).fail("raise ValueError('x')\nreturn 1\n")
    FakeHost(recursion_limit=150).run("return 1\n")
    assert sys.getrecursionlimit() == before


def test_a_recursion_limit_below_the_current_depth_is_reported():
    failure = FakeHost(recursion_limit=1).fail("return 1\n")
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "RecursionError", None)
    assert "the limit is too low" in failure.message


def test_foreign_awaitable_gets_a_clear_type_error():
    # Only reachable with the guard off: scripts cannot define __await__ or import asyncio.
    host = FakeHost(guard=False)
    script = "import asyncio\nx = 1\nawait asyncio.sleep(0)\nreturn 1\n"
    failure = host.fail(script)
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "TypeError", 3)
    assert "asyncio is not available" in failure.message
    assert "parallel()" in failure.message


def test_a_script_may_catch_the_foreign_await_error():
    host = FakeHost(guard=False)
    script = src(
        """
        import asyncio
        try:
            await asyncio.sleep(0)
        except TypeError:
            pass
        return await agent("still works")
        """
    )
    assert host.run(script) == "echo: still works"
