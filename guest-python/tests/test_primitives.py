"""agent, call_tool, phase, log, print and budget: what reaches the host, what comes back, and
every error path."""

import inspect
import json
import types

import pytest
from fakehost import AgentRequest, src

from flowbox_sdk.errors import CallFailed
from flowbox_sdk.primitives import is_awaitable, make_primitives
from flowbox_sdk.scheduler import Scheduler

# --- agent ---------------------------------------------------------------------------------


def test_agent_sends_every_option(host):
    script = src(
        """
        return await agent(
            {"task": "review", "files": ["a.py"]},
            schema={"type": "object"},
            agent_type="reviewer",
            label="Review a.py",
            instruction="Be brief",
            model="fast",
            tools=["read", "grep"],
            instance_id="rev-1",
        )
        """
    )
    assert host.run(script) == {"echo": {"task": "review", "files": ["a.py"]}}
    assert host.agent_requests == [
        AgentRequest(
            prompt='{"task": "review", "files": ["a.py"]}',
            schema='{"type": "object"}',
            agent_type="reviewer",
            label="Review a.py",
            instruction="Be brief",
            model="fast",
            tools=["read", "grep"],
            instance_id="rev-1",
            path=[],
        )
    ]


def test_text_prompt_is_sent_as_a_json_string_without_ascii_escapes(host):
    host.run('return await agent("héllo \\"you\\"")\n')
    assert host.agent_requests[0].prompt == '"héllo \\"you\\""'
    assert host.agent_requests[0].schema is None
    assert host.agent_requests[0].tools is None


def test_empty_tools_list_means_no_tools(host):
    host.run("return await agent('x', tools=[])\n")
    assert host.agent_requests[0].tools == []


def test_reply_is_decoded_json(host):
    host.agent = lambda request: {"score": 3, "notes": ["ok"]}
    assert host.run("r = await agent('x', schema={})\nreturn r['score']\n") == 3


def test_prompt_is_serialized_when_agent_is_called(host):
    script = "p = {'n': 1}\ncall = agent(p)\np['n'] = 2\nreturn await call\n"
    host.run(script)
    assert host.agent_requests[0].prompt == '{"n": 1}'


@pytest.mark.parametrize(
    "call, message",
    [
        ("agent({'a': {1, 2}})", 'agent() prompt["a"] is a set; use a list'),
        ("agent([float('nan')])", "agent() prompt[0] is NaN"),
        ("agent('x', schema='{}')", "agent() schema must be a dict (a JSON Schema), not str"),
        ("agent('x', schema={'a': b'x'})", 'agent() schema["a"] is bytes'),
        ("agent('x', agent_type=1)", "agent() agent_type must be a str, not int"),
        ("agent('x', label=['l'])", "agent() label must be a str, not list"),
        ("agent('x', instruction=1.5)", "agent() instruction must be a str, not float"),
        ("agent('x', model=True)", "agent() model must be a str, not bool"),
        ("agent('x', instance_id=7)", "agent() instance_id must be a str, not int"),
        ("agent('x', tools='read')", "agent() tools must be a list of tool names (str)"),
        ("agent('x', tools=['read', 1])", "agent() tools must be a list of tool names (str)"),
        ("agent('x', temperature=0)", "agent() got an unexpected keyword argument 'temperature'"),
        ("agent('x', 'y')", "agent() takes 1 positional argument but 2 were given"),
    ],
)
def test_agent_argument_errors_raise_at_call_time(host, call, message):
    failure = host.fail(f"x = 1\ny = {call}\nreturn 1\n")
    assert (failure.kind, failure.exception, failure.line) == ("uncaught", "TypeError", 2)
    assert failure.message.startswith(message)
    assert host.agent_requests == []


def test_agent_starts_lazily_when_awaited(host):
    script = src(
        """
        call = agent("later")
        log("created")
        reply = await call
        return reply
        """
    )
    host.run(script)
    names = [name for name, _ in host.calls]
    assert names.index("log") < names.index("start_agent")


def test_an_agent_call_never_awaited_never_starts(host):
    host.run("agent('x')\nreturn 1\n")
    assert host.agent_requests == []


def test_awaiting_an_agent_call_twice(host):
    failure = host.fail("call = agent('x')\nawait call\nawait call\nreturn 1\n")
    assert (failure.exception, failure.line) == ("RuntimeError", 3)
    assert "already awaited" in failure.message
    assert len(host.agent_requests) == 1


def test_a_reply_arrives_as_text_or_as_json_text(host):
    # The host hands a text reply as it is and any other as JSON text (the WIT `completion`):
    # each way, every path that takes a completion (an await, a parallel branch, a pipeline
    # stage) gives the script the same value, text untouched.
    text = 'say "hi"\n\\ \u00e9 \U0001f600'
    script = src(
        """
        direct = await agent("a")
        branches = await parallel([lambda: agent("b"), call_tool("echo", value=[1.5, "x"])])
        staged = await pipeline(["c"], lambda item: agent(item))
        return [direct, branches, staged]
        """
    )
    host.agent = lambda request: text
    host.tool = lambda name, arguments: arguments["value"]
    expected = [text, [text, [1.5, "x"]], [text]]
    assert host.run(script) == expected
    # A JSON string the host did not mark as text is decoded, as any JSON reply is.
    complete = host._complete

    def as_json(handle):
        completion = complete(handle)
        if completion.text:
            return completion._replace(reply=json.dumps(completion.reply), text=False)
        return completion

    host._complete = as_json
    assert host.run(script) == expected


@pytest.mark.parametrize(
    "kind, exception",
    [
        ("agent-failed", "AgentError"),
        ("budget-exceeded", "BudgetExceeded"),
        ("agent-cap-exceeded", "AgentCapExceeded"),
        ("tool-failed", "ToolError"),
        ("tool-cap-exceeded", "ToolCapExceeded"),
        ("invalid-request", "ValueError"),
    ],
)
def test_failed_completion_raises_the_matching_exception(host, kind, exception):
    def fail(request):
        raise CallFailed(kind, "host says no")

    host.agent = fail
    failure = host.fail("x = 1\nreply = await agent('x')\nreturn reply\n")
    assert (failure.kind, failure.exception, failure.message, failure.line) == (
        "uncaught", exception, "host says no", 2,
    )  # fmt: skip


@pytest.mark.parametrize(
    "kind, exception",
    [("budget-exceeded", "BudgetExceeded"), ("agent-cap-exceeded", "AgentCapExceeded"),
     ("invalid-request", "ValueError")],
)  # fmt: skip
def test_refused_start_raises_at_the_await(host, kind, exception):
    host.refuse = lambda request: (kind, "refused")
    failure = host.fail("x = 1\nreply = await agent('x')\nreturn reply\n")
    assert (failure.exception, failure.message, failure.line) == (exception, "refused", 2)
    assert host.named("await_next") == []


def test_scripts_catch_budget_exceeded_as_agent_error(host):
    host.refuse = lambda request: ("budget-exceeded", "no tokens left")
    script = src(
        """
        try:
            await agent("x")
        except BudgetExceeded as error:
            first = ["BudgetExceeded", str(error), isinstance(error, AgentError)]
        try:
            await agent("y")
        except AgentError:
            second = "AgentError"
        return [first, second]
        """
    )
    assert host.run(script) == [["BudgetExceeded", "no tokens left", True], "AgentError"]


def test_a_failed_leaf_says_whether_to_retry_and_why(host):
    failures = iter(
        [
            CallFailed("agent-failed", "slow down", retryable=True, cause="rate_limited"),
            CallFailed("agent-failed", "refused"),
            CallFailed("agent-failed", "fine now", retryable=True, cause="rate_limited"),
        ]
    )

    def fail(request):
        failure = next(failures)
        if failure.message == "fine now":
            return "done"
        raise failure

    host.agent = fail
    script = src(
        """
        seen = []
        for attempt in range(3):
            try:
                return [seen, await agent("x")]
            except AgentError as e:
                seen.append([str(e), e.retryable, e.kind])
        """
    )
    assert host.run(script) == [
        [["slow down", True, "rate_limited"], ["refused", False, "agent_failed"]],
        "done",
    ]


def test_a_refused_start_has_its_kind_and_is_not_retryable(host):
    host.refuse = lambda request: ("budget-exceeded", "no tokens left")
    script = src(
        """
        try:
            await agent("x")
        except AgentError as e:
            return [type(e).__name__, e.kind, e.retryable]
        """
    )
    assert host.run(script) == ["BudgetExceeded", "budget_exceeded", False]


def test_a_script_may_raise_the_errors_itself(host):
    script = src(
        """
        try:
            raise AgentError("mine")
        except AgentError as e:
            return [str(e), e.kind, e.retryable]
        """
    )
    assert host.run(script) == ["mine", "", False]


# --- call_tool -----------------------------------------------------------------------------


def test_call_tool_sends_name_arguments_and_path(host):
    host.tool = lambda name, arguments: {"hits": arguments["query"].upper()}
    script = "return await call_tool('search', query='flowbox', limit=3)\n"
    assert host.run(script) == {"hits": "FLOWBOX"}
    assert host.named("start_tool") == [("search", '{"query": "flowbox", "limit": 3}', [])]


def test_call_tool_accepts_an_argument_called_name(host):
    host.run("return await call_tool('greet', name='Ada')\n")
    assert host.named("start_tool")[0][1] == '{"name": "Ada"}'


def test_call_tool_failure_is_a_tool_error(host):
    def fail(name, arguments):
        raise CallFailed("tool-failed", "search is down")

    host.tool = fail
    script = "try:\n    await call_tool('search')\nexcept ToolError as e:\n    return str(e)\n"
    assert host.run(script) == "search is down"


def test_the_tool_call_cap_is_its_own_tool_error(host):
    host.refuse = lambda request: ("tool-cap-exceeded", "no more tool calls")
    script = src(
        """
        try:
            await call_tool('search')
        except ToolCapExceeded as e:
            return [str(e), isinstance(e, ToolError), e.kind, e.retryable]
        """
    )
    assert host.run(script) == ["no more tool calls", True, "tool_cap_exceeded", False]


def test_call_tool_refused_at_start(host):
    host.refuse = lambda request: ("tool-failed", "unknown tool 'nope'")
    failure = host.fail("return await call_tool('nope')\n")
    assert (failure.exception, failure.message) == ("ToolError", "unknown tool 'nope'")


@pytest.mark.parametrize(
    "call, message",
    [
        ("call_tool(3)", "call_tool() name must be a str, not int"),
        ("call_tool('t', x={1})", 'call_tool() arguments["x"] is a set; use a list'),
        ("call_tool('t', x=float('inf'))", 'call_tool() arguments["x"] is infinity'),
    ],
)
def test_call_tool_argument_errors(host, call, message):
    failure = host.fail(f"y = {call}\nreturn 1\n")
    assert (failure.exception, failure.message, failure.line) == ("TypeError", message, 1)


def test_awaiting_a_tool_call_twice(host):
    failure = host.fail("c = call_tool('t')\nawait c\nawait c\nreturn 1\n")
    assert (failure.exception, failure.line) == ("RuntimeError", 3)


# --- phase, log, print ---------------------------------------------------------------------


def test_phase_and_log(host):
    host.run("phase('Plan')\nlog('planning')\nlog({'n': 1})\nlog(3)\nreturn 1\n")
    assert host.named("phase") == [("Plan",)]
    assert host.logs == ["planning", "{'n': 1}", "3"]


def test_phase_needs_a_string(host):
    failure = host.fail("phase(1)\nreturn 1\n")
    assert (failure.exception, failure.message) == (
        "TypeError",
        "phase() title must be a str, not int",
    )


@pytest.mark.parametrize(
    "call, line",
    [
        ("print('a', 1, [2])", "a 1 [2]"),
        ("print('a', 'b', sep='-')", "a-b"),
        ("print('a', end='')", "a"),
        ("print('a', end='!\\n')", "a!"),
        ("print('a', end='\\n\\n')", "a\n"),
        ("print()", ""),
        ("print('x', sep=None, end=None, flush=True)", "x"),
    ],
)
def test_print_is_one_log_line(host, call, line):
    host.run(f"{call}\nreturn 1\n")
    assert host.logs == [line]


# --- budget --------------------------------------------------------------------------------


def test_budget_limited(host):
    host.budget_total, host.spent = 1000, 250
    assert host.run("return [budget.total, budget.spent(), budget.remaining()]\n") == [
        1000,
        250,
        750,
    ]


def test_budget_remaining_never_negative(host):
    host.budget_total, host.spent = 100, 180
    assert host.run("return budget.remaining()\n") == 0


def test_budget_unlimited(host):
    host.spent = 42
    assert host.run("return [budget.total, budget.spent(), budget.remaining()]\n") == [
        None,
        42,
        None,
    ]


def test_budget_is_read_from_the_host_each_time(host):
    host.tokens_per_leaf = 10
    script = "before = budget.spent()\nawait agent('x')\nreturn [before, budget.spent()]\n"
    assert host.run(script) == [0, 10]


def test_budget_repr(host):
    host.budget_total = 5
    assert (
        host.run("return repr(budget)\n")
        == "<budget total=5 spent=0 total_usd=None spent_usd=None>"
    )


def test_dollar_budget(host):
    host.budget_usd, host.spent_usd = 1.0, 1.25
    script = "return [budget.total_usd, budget.spent_usd(), budget.remaining_usd()]\n"
    assert host.run(script) == [1.0, 1.25, 0.0]
    host.budget_usd, host.spent_usd = None, 0.5
    assert host.run(script) == [None, 0.5, None]
    # Priced leaves with no spending known yet count as none spent.
    host.budget_usd, host.spent_usd = 2.0, None
    assert host.run(script) == [2.0, None, 2.0]


# --- frameless objects ---------------------------------------------------------------------

FRAME_ATTRIBUTES = (
    "cr_frame",
    "gi_frame",
    "ag_frame",
    "cr_code",
    "gi_code",
    "cr_await",
    "f_globals",
)


def sdk_objects(host):
    primitives = make_primitives(host, Scheduler(host))
    agent_call = primitives["agent"]("x")
    group = primitives["parallel"]([lambda: 1])
    flow = primitives["pipeline"]([1], lambda prev: prev)
    tool_call = primitives["call_tool"]("t")
    objects = [agent_call, group, flow, tool_call, primitives["budget"]]
    objects += [agent_call.__await__(), group.__await__(), flow.__await__(), tool_call.__await__()]
    objects += [primitives[name] for name in ("agent", "parallel", "pipeline", "call_tool", "log")]
    return objects


def test_sdk_objects_are_not_coroutines_or_generators(host):
    for value in sdk_objects(host):
        assert not inspect.iscoroutine(value), value
        assert not inspect.isgenerator(value), value
        assert not inspect.iscoroutinefunction(value), value
        assert not inspect.isgeneratorfunction(value), value
        for attribute in FRAME_ATTRIBUTES:
            assert not hasattr(value, attribute), (value, attribute)


def test_sdk_awaitables_have_slots_not_dicts(host):
    for value in sdk_objects(host)[:9]:
        assert not hasattr(value, "__dict__"), value


def test_await_iterator_protocol(host):
    iterator = make_primitives(host, Scheduler(host))["agent"]("x").__await__()
    assert iter(iterator) is iterator
    with pytest.raises(KeyError, match="thrown"):
        iterator.throw(KeyError("thrown"))
    with pytest.raises(ValueError):
        iterator.throw(ValueError)


def test_agent_call_repr(host):
    assert host.run("return repr(agent('x'))\n") == "<agent(...): not awaited yet>"


def test_is_awaitable_agrees_with_inspect(host):
    async def coroutine_function():
        return 1

    def generator_function():
        yield 1

    class Custom:
        def __await__(self):
            yield from ()

    primitives = make_primitives(host, Scheduler(host))
    coroutine = coroutine_function()
    values = [
        None, True, 1, 1.5, "s", [1], {"k": 1}, (1,), lambda: 1, len, Custom, Custom(), object(),
        coroutine, generator_function(), types.coroutine(generator_function)(),
        primitives["agent"]("x"), primitives["call_tool"]("t"),
        primitives["parallel"]([]), primitives["pipeline"]([]),
    ]  # fmt: skip
    for value in values:
        assert is_awaitable(value) == inspect.isawaitable(value), value
    coroutine.close()
