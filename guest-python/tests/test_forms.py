"""The three script forms, entry-point detection, syntax errors and the run/check lifecycle."""

from fakehost import FakeHost, src


def test_meta_and_async_main(host):
    result = host.run(
        src(
            """
            meta = {"name": "greet", "description": "Says hello"}

            async def main():
                reply = await agent("hello")
                return {"reply": reply}
            """
        )
    )
    assert result == {"reply": "echo: hello"}
    assert host.named("started") == [('{"name": "greet", "description": "Says hello"}',)]


BOM = "\ufeff"


def test_a_leading_byte_order_mark_is_dropped_and_moves_no_line(host):
    script = BOM + src(
        """
        meta = {"name": "greet", "description": "Says hello"}

        async def main():
            raise KeyError("k")
        """
    )
    assert host.check(script) == {"name": "greet", "description": "Says hello"}
    failure = host.fail(script)
    assert (failure.kind, failure.line, failure.exception) == ("uncaught", 4, "KeyError")
    assert host.run(BOM + "return 1\n") == 1
    assert host.fail(BOM + "x = 1\nreturn {1}\n").line == 2


def test_only_one_byte_order_mark_is_dropped(host):
    failure = host.fail(BOM + BOM + "return 1\n")
    assert (failure.kind, failure.line) == ("syntax", 1)


def test_sync_main_returning_a_plain_value(host):
    assert host.run("def main():\n    return [1, 2]\n") == [1, 2]


def test_sync_main_returning_an_awaitable_is_awaited(host):
    assert host.run("def main():\n    return agent('hi')\n") == "echo: hi"


def test_direct_body_with_top_level_await_and_return(host):
    script = src(
        """
        meta = {"name": "n", "description": "d"}
        first = await agent("one")
        return [first, args["x"]]
        """
    )
    assert host.run(script, {"x": 5}) == ["echo: one", 5]


def test_direct_body_detected_by_return_alone(host):
    assert host.run("x = 2\nreturn x * 3\n") == 6


def _body_form(script: str) -> str:
    from flowbox_sdk.script import build, may_declare_scope, parse

    entry = build(parse(script), False, may_declare_scope(script))
    return "module" if entry.function is None else "wrapped"


def test_a_direct_body_runs_as_the_module_unless_it_returns_early_or_declares_a_scope():
    assert _body_form("return 1\n") == "module"
    assert _body_form("x = await agent('a')\nreturn x\n") == "module"
    assert _body_form("await agent('a')\n") == "module"
    assert _body_form("return\n") == "module"
    assert _body_form("def f():\n    return 1\nreturn f()\n") == "module"
    assert _body_form("f = lambda: 1\nclass A:\n    x = 1\nreturn f()\n") == "module"
    assert _body_form("if args['x']:\n    return 1\nreturn 2\n") == "wrapped"
    assert _body_form("for i in [1]:\n    return i\n") == "wrapped"
    assert _body_form("x = 1\nreturn x\nlog('never')\n") == "wrapped"
    assert _body_form("await agent('a')\nyield 1\n") == "wrapped"
    assert _body_form("def f():\n    global x\nreturn 1\n") == "wrapped"
    assert _body_form("x = 0\ndef f():\n    nonlocal x\nreturn 1\n") == "wrapped"
    # The words alone are enough to keep the wrapper: the check is on the text.
    assert _body_form("x = 'nonlocal'\nreturn x\n") == "wrapped"


def test_a_direct_body_as_the_module_returns_its_final_value_and_keeps_its_lines(host):
    assert host.run("x = await agent('a')\nreturn [x, args['n']]\n", {"n": 2}) == ["echo: a", 2]
    assert host.run("await agent('a')\n") is None
    assert host.run("log('x')\nreturn\n") is None
    failure = host.fail("x = 1\n\nreturn {x}\n")
    assert (failure.kind, failure.line) == ("invalid-result", 3)
    failure = host.fail("x = await agent('a')\nraise KeyError(x)\nreturn 1\n")
    assert (failure.kind, failure.line, failure.exception) == ("uncaught", 2, "KeyError")
    # A body that never awaits runs without the scheduler: the same results and errors.
    assert host.run("x = args['n']\nreturn [x, None]\n", {"n": 2}) == [2, None]
    failure = host.fail("x = 1\nraise KeyError(x)\nreturn 1\n")
    assert (failure.kind, failure.line, failure.exception) == ("uncaught", 2, "KeyError")
    quiet = FakeHost()
    assert quiet.run("x = 1\nreturn x\n") == 1
    assert quiet.calls == [("started", (None,))]


def test_an_early_return_ends_a_direct_body(host):
    script = src(
        """
        if args["stop"]:
            return "early"
        log("went on")
        return "late"
        """
    )
    assert host.run(script, {"stop": True}) == "early"
    assert host.logs == []
    assert host.run(script, {"stop": False}) == "late"
    assert host.logs == ["went on"]


def test_a_direct_body_keeps_its_names_scopes_for_global_and_nonlocal(host):
    # `nonlocal` binds the body's own name; `global` one outside the body, as in a function.
    script = src(
        """
        x = 1
        def bump():
            nonlocal x
            x += 1
        bump()
        return x
        """
    )
    assert host.run(script) == 2
    script = src(
        """
        x = 1
        def set_global():
            global x
            x = 5
        set_global()
        return x
        """
    )
    assert host.run(script) == 1


def test_direct_body_detected_by_async_for_or_with(host):
    # `async for` needs an async iterator, which scripts cannot build; what matters here is
    # that the body is wrapped (otherwise this would be a syntax error, not a TypeError).
    failure = host.fail("async for x in [1]:\n    pass\nreturn 1\n")
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "TypeError", 1)


def test_direct_body_helpers_are_closures_over_body_names(host):
    script = src(
        """
        prefix = "item"

        def label(n):
            return f"{prefix}-{n}"

        async def ask(n):
            return await agent(label(n))

        results = await parallel([lambda n=n: ask(n) for n in range(2)])
        return results
        """
    )
    assert host.run(script) == ["echo: item-0", "echo: item-1"]


def test_direct_body_with_docstring_keeps_lines(host):
    script = src(
        '''
        """A workflow."""
        x = await agent("a")
        raise ValueError(x)
        '''
    )
    failure = host.fail(script)
    assert (failure.kind, failure.line, failure.message) == ("uncaught", 3, "echo: a")


def test_lone_async_run(host):
    assert host.run("async def run():\n    return await agent('r')\n") == "echo: r"


def test_main_is_preferred_over_run(host):
    script = src(
        """
        async def run():
            return "run"

        async def main():
            return "main"
        """
    )
    assert host.run(script) == "main"


def test_meta_is_optional_and_reported_as_none(host):
    host.run("async def main():\n    return 1\n")
    assert host.named("started") == [(None,)]


def test_top_level_statements_of_main_form_run_before_main(host):
    script = src(
        """
        log("module level")

        async def main():
            log("in main")
            return 1
        """
    )
    host.run(script)
    assert host.logs == ["module level", "in main"]


def test_started_comes_before_the_script_runs(host):
    host.run("log('go')\nreturn 1\n")
    assert [name for name, _ in host.calls] == ["started", "log"]


def test_no_entry_point(host):
    failure = host.fail("x = 1\ndef helper():\n    return x\n")
    assert failure.kind == "no-entry-point"
    assert failure.line is None
    assert "async def main()" in failure.message and "return result" in failure.message
    assert host.named("started") == []


def test_await_inside_a_function_does_not_make_a_direct_body(host):
    failure = host.fail("async def helper():\n    await agent('x')\n")
    assert failure.kind == "no-entry-point"


def test_syntax_error_has_the_line(host):
    failure = host.fail("x = 1\ny = (\n")
    assert failure.kind == "syntax"
    assert failure.line == 2
    assert host.named("started") == []


def test_compile_time_syntax_error_has_the_script_line(host):
    # `await` in a sync function passes ast.parse and fails in compile().
    failure = host.fail(
        src(
            """
        def helper():
            return await agent("x")

        async def main():
            return helper()
        """
        )
    )
    assert (failure.kind, failure.line) == ("syntax", 2)
    assert "await" in failure.message


def test_null_bytes_are_a_syntax_error(host):
    assert host.fail("return 1\x00\n").kind == "syntax"


def test_check_returns_meta_and_runs_nothing(host):
    meta = host.check(
        src(
            """
            meta = {"name": "n", "description": "d", "phases": [{"title": "Plan"}]}

            async def main():
                log("never")
                return await agent("never")
            """
        )
    )
    assert meta == {"name": "n", "description": "d", "phases": [{"title": "Plan"}]}
    assert host.calls == []


def test_check_returns_null_without_meta(host):
    assert host.check("return 1\n") is None


def test_check_reports_the_same_errors_as_run(host):
    assert host.check_fails("x = 1\n").kind == "no-entry-point"
    assert host.check_fails("import os\nreturn 1\n").kind == "forbidden"
    assert host.check_fails("meta = {'name': 1}\nreturn 1\n").kind == "invalid-meta"
    assert host.check_fails("return (\n").kind == "syntax"


def test_invalid_args_json(host):
    from flowbox_sdk import runner
    from flowbox_sdk.script import ScriptFailure

    try:
        runner.run(host, "return 1\n", "{not json", host.settings)
    except ScriptFailure as failure:
        assert (failure.kind, failure.exception) == ("uncaught", "ValueError")
        assert "args are not valid JSON" in failure.message
    else:
        raise AssertionError("invalid args were accepted")
    assert host.named("started") == []


def test_args_are_decoded_fresh_for_each_run(host):
    script = "args['items'].append(4)\nreturn args\n"
    payload = {"items": [1, 2, 3]}
    assert host.run(script, payload) == {"items": [1, 2, 3, 4]}
    assert host.run(script, payload) == {"items": [1, 2, 3, 4]}
    assert payload == {"items": [1, 2, 3]}


def test_empty_args_are_a_dict_of_the_runs_own(host):
    script = "args['added'] = True\nreturn args\n"
    assert host.run(script) == {"added": True}
    assert host.run(script, {}) == {"added": True}


def test_json_aliases(host):
    assert host.run("return [true, false, null]\n") == [True, False, None]


def test_a_script_may_rebind_the_aliases(host):
    assert host.run("true = 'yes'\nreturn true\n") == "yes"


def test_same_run_twice_makes_the_same_calls(host):
    from fakehost import FakeHost

    script = src(
        """
        a = await parallel([lambda: agent("x"), lambda: agent("y")])
        b = await agent(a[0])
        return [a, b]
        """
    )
    first, second = FakeHost(), FakeHost()
    first.deliver = second.deliver = lambda pending: pending[::-1][:1]
    assert first.run(script) == second.run(script)
    assert first.calls == second.calls


def test_deeply_nested_source_is_a_syntax_error_not_a_crash(host):
    for expression in ["-" * 10000 + "1", "+".join(["1"] * 100000)]:
        failure = host.check_fails(f"return {expression}\n")
        assert failure.kind == "syntax"
        assert failure.message.startswith("the script is nested too deeply to compile")

