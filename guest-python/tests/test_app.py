"""app.py, the WIT adapter, against the real generated bindings (`componentize-py bindings`),
with the import functions the component would get from the host replaced by a fake host."""

import importlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakehost import FakeHost, src

from flowbox_sdk.errors import CallFailed
from flowbox_sdk.host import AgentOptions

WIT = Path(__file__).resolve().parents[2] / "wit"


@pytest.fixture(scope="session")
def bindings(tmp_path_factory):
    tool = shutil.which("componentize-py", path=os.path.dirname(sys.executable))
    if tool is None:
        pytest.skip("componentize-py is not installed next to this python")
    out = tmp_path_factory.mktemp("bindings")
    subprocess.run(
        [tool, "-d", str(WIT), "-w", "workflow", "bindings", str(out)],
        check=True,
        capture_output=True,
    )
    sys.path.insert(0, str(out))
    yield out
    sys.path.remove(str(out))


class WitFake:
    """The generated import functions, answered by a FakeHost and converted to WIT types."""

    def __init__(self, wit, types, host: FakeHost):
        self.wit, self.types, self.host = wit, types, host
        self.agent_requests = []  # (prompt, options record, path) as app.py passed them

    def _err(self, failure: CallFailed):
        kind = self.wit.ErrorKind[failure.kind.upper().replace("-", "_")]
        return self.types.Err(
            self.wit.CallError(kind, failure.message, failure.retryable, failure.cause)
        )

    def install(self, monkeypatch):
        wit, host = self.wit, self.host

        def start_agent(prompt, options, path):
            self.agent_requests.append((prompt, options, path))
            record = None if options is None else AgentOptions(**vars(options))
            try:
                return host.start_agent(prompt, record, path), None
            except CallFailed as failure:
                return 0, self._err(failure).value

        def start_tool(name, arguments, path):
            try:
                return host.start_tool(name, arguments, path), None
            except CallFailed as failure:
                return 0, self._err(failure).value

        def await_next():
            try:
                completions = host.await_next()
            except CallFailed as failure:
                raise self._err(failure) from None
            return [
                (completion.handle, completion.reply, None, completion.text)
                if completion.failure is None
                else (completion.handle, "", self._err(completion.failure).value, False)
                for completion in completions
            ]

        def budget():
            state = host.budget()
            return wit.BudgetState(
                total=state.total,
                spent=state.spent,
                total_usd=state.total_usd,
                spent_usd=state.spent_usd,
            )

        functions = {
            "started": host.started,
            "start_agent": start_agent,
            "start_tool": start_tool,
            "await_next": await_next,
            "phase": host.phase,
            "log": host.log,
            "budget": budget,
            "sleep": host.sleep,
        }
        for name, function in functions.items():
            monkeypatch.setattr(wit, name, function)


def run_export(app, script: str, args: str, guard: bool = True, recursion_limit: int = 1000):
    """The `run` export, as the host calls it."""
    return app.WitWorld().run(script, args, guard, recursion_limit)


@pytest.fixture
def guest(bindings, monkeypatch, host):
    """A fresh import of app.py wired to `host`; time.sleep is restored afterwards."""
    monkeypatch.setattr(time, "sleep", time.sleep)
    monkeypatch.setattr(random, "seed", random.seed)
    sys.modules.pop("app", None)
    app = importlib.import_module("app")
    # What componentize-py's runtime does on an instance's first export call.
    random.seed()
    wit = importlib.import_module("wit_world.imports.host")
    types = importlib.import_module("componentize_py_types")
    fake = WitFake(wit, types, host)
    fake.install(monkeypatch)
    yield app, fake, types
    sys.modules.pop("app", None)


def test_run_returns_json_text_and_passes_paths_as_they_are(guest, host):
    app, fake, _ = guest
    script = src(
        """
        meta = {"name": "n", "description": "d"}
        pair = await parallel([lambda: agent("a", tools=["t"]), lambda: call_tool("t", q=1)])
        return {"pair": pair, "args": args}
        """
    )
    result = run_export(app, script, '{"k": [1]}')
    assert json.loads(result) == {
        "pair": ["echo: a", {"tool": "t", "arguments": {"q": 1}}],
        "args": {"k": [1]},
    }
    assert host.named("started") == [('{"name": "n", "description": "d"}',)]
    prompt, options, path = fake.agent_requests[0]
    assert prompt == '"a"'
    assert path == [(1, 0, 2, None)]
    assert isinstance(options, fake.wit.AgentOptions)
    assert options.tools == ["t"] and options.schema is None
    assert host.named("start_tool") == [("t", '{"q": 1}', [(1, 1, 2, None)])]


def test_pipeline_paths_cross_with_their_stage(guest, host):
    app, fake, _ = guest
    script = "return await pipeline(['x'], lambda item: item, lambda prev: agent(prev))\n"
    assert json.loads(run_export(app, script, "{}")) == ["echo: x"]
    _, _, path = fake.agent_requests[0]
    assert path == [(1, 0, 1, 2)]


def test_a_call_without_options_sends_none(guest):
    app, fake, _ = guest
    run_export(app, "return await agent('plain')\n", "{}")
    assert fake.agent_requests == [('"plain"', None, [])]


def test_every_agent_option_reaches_its_record_field(guest):
    app, fake, _ = guest
    script = src(
        """
        return await agent(
            "p", schema={"type": "string"}, agent_type="t", label="l", instruction="i",
            model="m", tools=["x"], instance_id="id",
        )
        """
    )  # fmt: skip
    run_export(app, script, "{}")
    prompt, options, path = fake.agent_requests[0]
    assert (prompt, path) == ('"p"', [])
    assert vars(options) == {
        "schema": '{"type": "string"}',
        "agent_type": "t",
        "label": "l",
        "instruction": "i",
        "model": "m",
        "tools": ["x"],
        "instance_id": "id",
    }


@pytest.mark.parametrize(
    "call",
    [
        'agent("\\ud800")',
        'agent("x", label="\\udfff")',
        'agent("x", tools=["\\ud800"])',
        'agent({"k": "\\ud800"})',
        'call_tool("t", q="\\ud800")',
    ],
)
def test_text_that_is_not_utf8_is_a_value_error_not_a_crash(guest, host, call):
    app, fake, _ = guest
    script = f"try:\n    await {call}\nexcept ValueError as e:\n    return str(e)\n"
    message = json.loads(run_export(app, script, "{}"))
    assert "lone surrogate" in message
    assert fake.agent_requests == [] and host.named("start_tool") == []


def test_logs_results_and_errors_never_carry_a_lone_surrogate(guest, host):
    app, _, types = guest
    world = importlib.import_module("wit_world")
    run_export(app, 'log("a\\ud800b")\nphase("\\udfff")\nreturn 1\n', "{}")
    assert host.logs == ["a\\ud800b"] and host.named("phase") == [("\\udfff",)]
    with pytest.raises(types.Err) as raised:
        run_export(app, 'return {"k": "\\ud800"}\n', "{}")
    assert raised.value.value.kind == world.ScriptErrorKind.INVALID_RESULT
    assert "lone surrogate" in raised.value.value.message
    with pytest.raises(types.Err) as raised:
        run_export(app, 'raise ValueError("\\ud800")\nreturn 1\n', "{}")
    assert raised.value.value.message == "\\ud800"
    raised.value.value.message.encode("utf-8")


def test_script_errors_become_wit_script_errors(guest):
    app, _, types = guest
    world = importlib.import_module("wit_world")
    with pytest.raises(types.Err) as raised:
        run_export(app, "x = 1\nraise KeyError('k')\nreturn 1\n", "{}")
    assert raised.value.value == world.ScriptError(
        world.ScriptErrorKind.UNCAUGHT, "'k'", 2, "KeyError"
    )


@pytest.mark.parametrize(
    "script, kind",
    [
        ("return (\n", "SYNTAX"),
        ("meta = {'name': 1}\nreturn 1\n", "INVALID_META"),
        ("import os\nreturn 1\n", "FORBIDDEN"),
        ("x = 1\n", "NO_ENTRY_POINT"),
        ("raise MemoryError()\nreturn 1\n", "OUT_OF_MEMORY"),
        ("return {1}\n", "INVALID_RESULT"),
    ],
)
def test_every_script_error_kind_maps(guest, script, kind):
    app, _, types = guest
    world = importlib.import_module("wit_world")
    with pytest.raises(types.Err) as raised:
        run_export(app, script, "{}")
    assert raised.value.value.kind == world.ScriptErrorKind[kind]


def test_check_returns_meta_or_a_wit_error(guest, host):
    app, _, types = guest
    meta = app.WitWorld().check('meta = {"name": "n", "description": "d"}\nreturn 1\n', True)
    assert json.loads(meta) == {"name": "n", "description": "d"}
    assert app.WitWorld().check("return 1\n", True) == "null"
    with pytest.raises(types.Err):
        app.WitWorld().check("import os\nreturn 1\n", True)
    assert host.named("started") == []


def test_plan_notes_list_reply_dependent_constructs_or_a_wit_error(guest, host):
    app, _, types = guest
    script = "r = await agent('x')\nif r:\n    pass\nreturn 1\n"
    notes = json.loads(app.WitWorld().plan_notes(script, []))
    assert notes == [{"line": 2, "construct": "if", "loop_trip_count": False}]
    with pytest.raises(types.Err):
        app.WitWorld().plan_notes("x = (\n", [])
    # The guard is the run's to apply.
    assert app.WitWorld().plan_notes("import os\nreturn 1\n", []) == "[]"
    assert host.named("started") == []


@pytest.mark.parametrize(
    "kind, exception",
    [
        ("agent-failed", "AgentError"),
        ("budget-exceeded", "BudgetExceeded"),
        ("agent-cap-exceeded", "AgentCapExceeded"),
        ("tool-failed", "ToolError"),
        ("invalid-request", "ValueError"),
    ],
)
def test_call_errors_map_both_at_start_and_on_completion(guest, host, kind, exception):
    app, _, _ = guest
    script = src(
        """
        caught = []
        for call in [lambda: agent("refused"), lambda: agent("failed"),
                     lambda: call_tool("refused")]:
            try:
                await call()
            except Exception as error:
                caught.append([type(error).__name__, str(error)])
        return caught
        """
    )
    # An agent request's first field is its prompt, a tool request's the tool's name.
    host.refuse = lambda request: (kind, "no start") if "refused" in request[0] else None

    def agent(request):
        raise CallFailed(kind, "no reply")

    host.agent = agent
    result = json.loads(run_export(app, script, "{}"))
    assert result == [[exception, "no start"], [exception, "no reply"], [exception, "no start"]]


def test_await_next_error_is_reported(guest, host):
    app, _, types = guest
    host.await_error = CallFailed("invalid-request", "nothing is pending")
    with pytest.raises(types.Err) as raised:
        run_export(app, "return await agent('x')\n", "{}")
    assert (
        raised.value.value.message == "the host could not deliver completions: nothing is pending"
    )


def test_budget_settings_log_and_phase_pass_through(guest, host):
    app, _, _ = guest
    host.budget_total, host.spent = 10, 4
    host.budget_usd, host.spent_usd = 2.5, 0.75
    script = (
        "phase('P')\nprint('hi')\n"
        "return [budget.total, budget.remaining(), budget.total_usd, budget.spent_usd(),"
        " budget.remaining_usd()]\n"
    )
    assert json.loads(run_export(app, script, "{}")) == [10, 6, 2.5, 0.75, 1.75]
    assert host.named("phase") == [("P",)] and host.logs == ["hi"]


def test_settings_are_honoured(guest, host):
    app, _, types = guest
    host.guard = False
    script = "import os\nreturn os.sep\n"
    assert json.loads(run_export(app, script, "{}", guard=False)) == os.sep
    with pytest.raises(types.Err) as raised:
        run_export(app, script, "{}", guard=True)
    assert raised.value.value.kind.name == "FORBIDDEN"


def test_time_sleep_advances_the_virtual_clock(guest, host):
    app, _, _ = guest
    assert json.loads(run_export(app, "import time\ntime.sleep(0.25)\nreturn 1\n", "{}")) == 1
    assert host.named("sleep") == [(250_000_000,)]


def test_random_is_reseeded_from_wasi_randomness_every_run(guest, monkeypatch):
    app, _, _ = guest
    script = "import random\nreturn [random.random(), random.randint(1, 10**9)]\n"
    monkeypatch.setattr(os, "urandom", lambda n: b"\x01" * n)
    first = run_export(app, script, "{}")
    assert run_export(app, script, "{}") == first
    monkeypatch.setattr(os, "urandom", lambda n: b"\x02" * n)
    assert run_export(app, script, "{}") != first


def test_the_runtimes_reseeding_draws_nothing_and_gives_scripts_the_real_seed(
    bindings, monkeypatch
):
    real_seed = random.seed
    monkeypatch.setattr(random, "seed", random.seed)
    sys.modules.pop("app", None)
    importlib.import_module("app")
    try:
        assert random.seed is not real_seed  # the stand-in the runtime looks up
        state = random.getstate()
        random.seed()  # the runtime's reseeding, on the first export call
        assert random.getstate() == state
        assert random.seed == real_seed
    finally:
        sys.modules.pop("app", None)
