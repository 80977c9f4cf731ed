"""parallel and pipeline: argument checks before anything starts, input-ordered results whatever
the completion order, failure isolation, batching, and group/path numbering."""

import pytest
from fakehost import src

from flowbox_sdk.errors import CallFailed
from flowbox_sdk.host import BranchFailure


def fail_on(word):
    def agent(request):
        if word in request.prompt:
            raise CallFailed("agent-failed", f"cannot do {word}")
        return f"ok {request.prompt}"

    return agent


# --- parallel ------------------------------------------------------------------------------


def test_parallel_accepts_every_kind_of_item(host):
    script = src(
        """
        async def ask():
            return await agent("fn")

        async def nested():
            return await parallel([lambda: agent("inner")])

        return await parallel((
            ask,                       # async function
            lambda: agent("lambda"),   # lambda returning an awaitable
            lambda: 42,                # lambda returning a plain value
            agent("call"),             # an agent call
            ask(),                     # a coroutine
            nested(),                  # a coroutine awaiting another group
            parallel([lambda: "p"]),   # another parallel
            pipeline([1], lambda x: x + 1),
            len,                       # a builtin: called with no arguments fails -> None
        ))
        """
    )
    assert host.run(script) == [
        "echo: fn", "echo: lambda", 42, "echo: call", "echo: fn", ["echo: inner"], ["p"], [2], None,
    ]  # fmt: skip


def test_results_follow_input_order_when_completions_arrive_reversed(host):
    host.deliver = lambda pending: list(reversed(pending))
    script = "return await parallel([lambda n=n: agent(str(n)) for n in range(4)])\n"
    assert host.run(script) == ["echo: 0", "echo: 1", "echo: 2", "echo: 3"]
    assert host.batches == [[4, 3, 2, 1]]


def test_results_follow_input_order_when_completions_arrive_one_by_one(host):
    host.deliver = lambda pending: [pending[-1]]
    script = "return await parallel([lambda n=n: agent(str(n)) for n in range(3)])\n"
    assert host.run(script) == ["echo: 0", "echo: 1", "echo: 2"]
    assert host.batches == [[3], [2], [1]]


def test_three_pending_leaves_need_exactly_one_await_next(host):
    script = "return await parallel([lambda: agent('a'), lambda: agent('b'), lambda: agent('c')])\n"
    host.run(script)
    names = [name for name, _ in host.calls]
    assert names == [
        "started",
        "start_agent",
        "start_agent",
        "start_agent",
        "await_next",
    ]
    assert host.batches == [[1, 2, 3]]


def test_woken_tasks_resume_in_delivery_order(host):
    host.deliver = lambda pending: list(reversed(pending))
    script = src(
        """
        async def step(n):
            await agent(str(n))
            log(f"resumed {n}")

        await parallel([lambda n=n: step(n) for n in range(3)])
        return 1
        """
    )
    host.run(script)
    assert host.logs == ["resumed 2", "resumed 1", "resumed 0"]


def test_failed_branch_becomes_none_and_logs_one_line(host):
    host.agent = fail_on("bad")
    script = "return await parallel([lambda: agent('good'), lambda: agent('bad'), lambda: 1 / 0])\n"
    assert host.run(script) == ['ok "good"', None, None]
    # Item 2 fails at once; item 1 only when its completion arrives.
    assert host.logs == [
        "parallel item 2 failed: ZeroDivisionError: division by zero",
        "parallel item 1 failed: AgentError: cannot do bad",
    ]


def test_every_failed_branch_is_reported_with_its_exception_and_line(host):
    host.agent = fail_on("bad")
    script = src(
        """
        async def review(x):
            return await agent(f"review {x}")

        def broken(x):
            return agent(x + 1)

        return await parallel([
            lambda: agent('good'),
            lambda: agent('bad'),
            lambda: broken('text'),
            review('bad'),
            agent('bad'),
        ])
        """
    )
    assert host.run(script) == ['ok "good"', None, None, None, None]
    failures = sorted(host.failures, key=lambda f: f.index)
    assert failures == [
        # A leaf's failure has no script frame of its own: the line of the branch's lambda.
        BranchFailure("parallel", 1, None, "AgentError", "cannot do bad", 9),
        # The script's own mistake, at the line that raised it.
        BranchFailure("parallel", 2, None, "TypeError",
                      'can only concatenate str (not "int") to str', 5),
        # A coroutine of the script's: the line of its await.
        BranchFailure("parallel", 3, None, "AgentError", "cannot do bad", 2),
        # A bare awaitable: the line of the parallel() call.
        BranchFailure("parallel", 4, None, "AgentError", "cannot do bad", 7),
    ]  # fmt: skip
    # The log lines for people stay.
    assert len(host.logs) == 4


def test_refused_branch_becomes_none(host):
    host.refuse = lambda request: ("agent-cap-exceeded", "cap") if "b" in request.prompt else None
    assert host.run("return await parallel([agent('a'), agent('b')])\n") == ["echo: a", None]
    assert host.logs == ["parallel item 1 failed: AgentCapExceeded: cap"]


def test_base_exception_in_a_branch_propagates_after_the_group():
    from fakehost import FakeHost

    host = FakeHost(guard=False)  # the guard hides the names needed to raise one
    script = src(
        """
        async def stop():
            raise KeyboardInterrupt("stop")

        try:
            await parallel([lambda: agent("a"), stop, lambda: agent("b")])
        except BaseException as error:
            return [type(error).__name__, "caught"]
        """
    )
    assert host.run(script) == ["KeyboardInterrupt", "caught"]
    assert len(host.agent_requests) == 2  # the siblings ran to completion


@pytest.mark.parametrize(
    "group",
    ["parallel([shared, shared])", "pipeline([1, 2], lambda value: shared)"],
)
def test_a_coroutine_awaited_by_two_items_fails_the_second_only(host, group):
    script = src(
        f"""
        async def ask():
            return await agent("once")

        shared = ask()
        return await {group}
        """
    )
    assert host.run(script) == ["echo: once", None]
    assert [failure.exception for failure in host.failures] == ["RuntimeError"]
    assert "coroutine is being awaited already" in host.failures[0].message


def test_a_stage_whose_failure_cannot_be_reported_fails_its_pipeline_not_the_run():
    from fakehost import FakeHost

    host = FakeHost(guard=False)  # the guard refuses a class that defines __getattr__
    script = src(
        """
        class Unnamed:
            asked = 0

            def __call__(self, value):
                raise ValueError("the stage's own failure")

            def __getattr__(self, name):  # named once, when pipeline() checks its stages
                Unnamed.asked += 1
                if Unnamed.asked > 1:
                    raise KeyError(name)
                raise AttributeError(name)

        try:
            return await pipeline([1], Unnamed())
        except KeyError as error:
            return f"caught {error!r}"
        """
    )
    assert host.run(script) == "caught KeyError('__name__')"


def test_uncaught_base_exception_in_a_branch_ends_the_run():
    from fakehost import FakeHost

    host = FakeHost(guard=False)
    script = "async def stop():\n    raise SystemExit(3)\nawait parallel([stop])\nreturn 1\n"
    failure = host.fail(script)
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "SystemExit", 2)


@pytest.mark.parametrize(
    "items, message",
    [
        (
            "[lambda: agent('a'), 'text']",
            "parallel() item 1 is a str, not a function or an awaitable",
        ),
        ("[agent('a'), 3]", "parallel() item 1 is a int"),
        ("[None]", "parallel() item 0 is a NoneType"),
        ("5", "parallel() takes a list of functions or awaitables, not int"),
    ],
)
def test_parallel_type_errors_raise_before_anything_starts(host, items, message):
    failure = host.fail(f"x = 1\ngroup = parallel({items})\nreturn 1\n")
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "TypeError", 2)
    assert failure.message.startswith(message)
    assert host.agent_requests == []


def test_parallel_is_lazy_and_awaitable_once(host):
    script = src(
        """
        group = parallel([lambda: agent("a")])
        log("built")
        first = await group
        await group
        """
    )
    failure = host.fail(script)
    assert (failure.exception, failure.line) == ("RuntimeError", 4)
    assert "already awaited" in failure.message
    names = [name for name, _ in host.calls]
    assert names.index("log") < names.index("start_agent")


def test_empty_parallel(host):
    assert host.run("return await parallel([])\n") == []
    assert host.named("await_next") == []


def test_parallel_of_a_generator_expression(host):
    script = "return await parallel(lambda n=n: n * 2 for n in range(3))\n"
    assert host.run(script) == [0, 2, 4]


# --- paths and groups ----------------------------------------------------------------------


def test_group_numbers_and_paths_nest(host):
    script = src(
        """
        top = await agent("top")

        async def inner(n):
            return await parallel([lambda: agent(f"{n}-a"), lambda: agent(f"{n}-b")])

        outer = await parallel([lambda: inner(0), lambda: agent("solo"), lambda: inner(1)])
        flow = await pipeline(["p"], lambda item: agent(item))
        return [top, outer, flow]
        """
    )
    host.run(script)
    paths = {request.prompt: request.path for request in host.agent_requests}
    assert paths == {
        '"top"': [],
        '"solo"': [(1, 1, 3, None)],
        '"0-a"': [(1, 0, 3, None), (2, 0, 2, None)],
        '"0-b"': [(1, 0, 3, None), (2, 1, 2, None)],
        '"1-a"': [(1, 2, 3, None), (3, 0, 2, None)],
        '"1-b"': [(1, 2, 3, None), (3, 1, 2, None)],
        '"p"': [(4, 0, 1, 1)],
    }


def test_pipeline_calls_carry_their_stage_and_nest(host):
    script = src(
        """
        async def review(draft):
            return await parallel([lambda: agent(f"{draft}-x"), lambda: agent(f"{draft}-y")])

        return await pipeline(
            ["a", "b"],
            lambda item: agent(item),
            review,
            lambda prev, item: call_tool("t", item=item),
        )
        """
    )
    host.run(script)
    paths = {request.prompt: request.path for request in host.agent_requests}
    assert paths == {
        '"a"': [(1, 0, 2, 1)],
        '"b"': [(1, 1, 2, 1)],
        '"echo: a-x"': [(1, 0, 2, 2), (2, 0, 2, None)],
        '"echo: a-y"': [(1, 0, 2, 2), (2, 1, 2, None)],
        '"echo: b-x"': [(1, 1, 2, 2), (3, 0, 2, None)],
        '"echo: b-y"': [(1, 1, 2, 2), (3, 1, 2, None)],
    }
    tools = sorted(path for _, _, path in host.named("start_tool"))
    assert tools == [[(1, 0, 2, 3)], [(1, 1, 2, 3)]]


def test_group_number_is_taken_when_first_awaited(host):
    script = src(
        """
        later = parallel([lambda: agent("later")])
        sooner = parallel([lambda: agent("sooner")])
        await sooner
        await later
        return 1
        """
    )
    host.run(script)
    assert [(r.prompt, r.path) for r in host.agent_requests] == [
        ('"sooner"', [(1, 0, 1, None)]),
        ('"later"', [(2, 0, 1, None)]),
    ]


def test_an_agent_call_takes_the_path_of_the_task_that_awaits_it(host):
    host.run("call = agent('x')\nreturn await parallel([call])\n")
    assert host.agent_requests[0].path == [(1, 0, 1, None)]


def test_tool_calls_carry_the_path(host):
    host.run("return await parallel([lambda: call_tool('t'), lambda: call_tool('u')])\n")
    paths = [path for _, _, path in host.named("start_tool")]
    assert paths == [[(1, 0, 2, None)], [(1, 1, 2, None)]]


# --- pipeline ------------------------------------------------------------------------------


def test_pipeline_stages_get_prev_item_and_index_by_arity(host):
    script = src(
        """
        async def draft(topic):
            return await agent(f"draft {topic}")

        def review(text, topic):
            return agent(f"review {text} for {topic}")

        def label(text, topic, index):
            return f"{index}:{topic}:{text}"

        return await pipeline(["a", "b"], draft, review, label)
        """
    )
    assert host.run(script) == [
        "0:a:echo: review echo: draft a for a",
        "1:b:echo: review echo: draft b for b",
    ]


def test_pipeline_has_no_barrier_between_stages(host):
    # Item 1's first stage finishes last; item 0 must reach stage two before then.
    host.deliver = lambda pending: [min(pending)]
    script = src(
        """
        def first(item):
            return agent(f"first {item}")

        def second(prev):
            return agent(f"second {prev}")

        return await pipeline([0, 1], first, second)
        """
    )
    host.run(script)
    prompts = [request.prompt for request in host.agent_requests]
    assert prompts == ['"first 0"', '"first 1"', '"second echo: first 0"', '"second echo: first 1"']
    assert host.batches == [[1], [2], [3], [4]]
    # Handle 3 (item 0's second stage) started before handle 2 (item 1's first) completed.
    order = [name for name, _ in host.calls if name in ("start_agent", "await_next")]
    assert order == ["start_agent", "start_agent", "await_next", "start_agent", "await_next",
                     "start_agent", "await_next", "await_next"]  # fmt: skip


def test_pipeline_results_follow_input_order(host):
    host.deliver = lambda pending: list(reversed(pending))
    script = "return await pipeline([0, 1, 2], lambda n: agent(str(n)), lambda p: p.upper())\n"
    assert host.run(script) == ["ECHO: 0", "ECHO: 1", "ECHO: 2"]


def test_stage_returning_none_skips_later_stages(host):
    script = src(
        """
        def keep_even(n):
            return n if n % 2 == 0 else None

        def ask(n):
            return agent(str(n))

        return await pipeline([0, 1, 2], keep_even, ask)
        """
    )
    assert host.run(script) == ["echo: 0", None, "echo: 2"]
    assert [r.prompt for r in host.agent_requests] == ['"0"', '"2"']
    assert host.logs == []


def test_stage_raising_makes_the_item_none_and_logs(host):
    host.agent = fail_on("1")
    script = src(
        """
        def ask(n):
            return agent(str(n))

        def shout(text):
            return text.upper()

        return await pipeline([0, 1], ask, shout)
        """
    )
    assert host.run(script) == ['OK "0"', None]
    assert host.logs == ["pipeline item 1 failed in stage 1 (ask): AgentError: cannot do 1"]
    # The stage returned the call unawaited, so its line is the stage's own.
    assert host.failures == [BranchFailure("pipeline", 1, 1, "AgentError", "cannot do 1", 1)]


def test_a_stage_that_raises_is_reported_at_its_line(host):
    script = src(
        """
        def double(n):
            return n * 2

        def invert(n):
            return 1 / (n - 2)

        return await pipeline([0, 1, 2], double, invert)
        """
    )
    assert host.run(script) == [-0.5, None, 0.5]
    assert host.failures == [
        BranchFailure("pipeline", 1, 2, "ZeroDivisionError", "division by zero", 5)
    ]


def test_a_stage_returning_none_is_no_failure(host):
    script = "return await pipeline([1, 2], lambda n: None if n == 1 else n)\n"
    assert host.run(script) == [None, 2]
    assert host.failures == []


def test_pipeline_without_stages_returns_the_items(host):
    assert host.run("return await pipeline((1, 'a', None))\n") == [1, "a", None]


def test_pipeline_stage_arity_from_defaults_varargs_and_methods(host):
    script = src(
        """
        class Tagger:
            def __init__(self, tag):
                self.tag = tag

            def apply(self, prev, item):
                return f"{self.tag}{prev}{item}"

        def loose(prev, item=None, index=None, extra=None):
            return [prev, item, index, extra]

        def spread(*parts):
            return list(parts)

        first = await pipeline(["x"], Tagger("#").apply)
        second = await pipeline(["x"], loose)
        third = await pipeline(["x"], spread)
        fourth = await pipeline(["x"], str.upper, len)
        return [first, second, third, fourth]
        """
    )
    assert host.run(script) == [["#xx"], [["x", "x", 0, None]], [["x", "x", 0]], [1]]


@pytest.mark.parametrize(
    "stages, message",
    [
        ("lambda: 1", "pipeline() stage 1 (<lambda>) takes no arguments"),
        ("str, 'upper'", "pipeline() stage 2 (a str) is not callable"),
        ("four", "pipeline() stage 1 (four) requires 4 positional arguments"),
        (
            "lambda p: p, keyword",
            "pipeline() stage 2 (keyword) requires the keyword-only argument 'k'",
        ),
    ],
)
def test_pipeline_stage_errors_raise_before_anything_starts(host, stages, message):
    script = src(
        f"""
        def four(a, b, c, d):
            return a

        def keyword(prev, *, k):
            return prev

        x = 1
        flow = pipeline([agent("a")], {stages})
        return 1
        """
    )
    failure = host.fail(script)
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "TypeError", 8)
    assert failure.message.startswith(message)
    assert "stage(prev), stage(prev, item) or stage(prev, item, index)" in failure.message
    assert host.agent_requests == []


def test_pipeline_items_must_be_iterable(host):
    failure = host.fail("flow = pipeline(3, str)\nreturn 1\n")
    assert (failure.exception, failure.message) == (
        "TypeError", "pipeline() takes a list of items first, not int",
    )  # fmt: skip


def test_awaiting_a_pipeline_twice(host):
    failure = host.fail("f = pipeline([1])\nawait f\nawait f\nreturn 1\n")
    assert (failure.exception, failure.line) == ("RuntimeError", 3)


def test_callable_instance_stage_arity_comes_from_its_call_method(host):
    script = src(
        """
        class Join:
            def __call__(self, prev, item, index):
                return f"{prev}/{item}/{index}"

        return await pipeline(["a"], Join())
        """
    )
    assert host.run(script) == ["a/a/0"]


def test_an_error_raised_while_reading_the_items_is_not_mislabelled(host):
    script = (
        "def items():\n    yield 1\n    raise TypeError('bad item')\nflow = pipeline(items())\n"
    )
    failure = host.fail(script + "return 1\n")
    assert (failure.exception, failure.message, failure.line) == ("TypeError", "bad item", 3)


def test_a_failure_whose_message_cannot_be_printed_is_still_logged(host):
    script = src(
        """
        class Odd(Exception):
            def __str__(self):
                raise ValueError("no")

        def boom():
            raise Odd()

        return await parallel([boom])
        """
    )
    assert host.run(script) == [None]
    assert host.logs == ["parallel item 0 failed: Odd"]
