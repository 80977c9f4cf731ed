"""flowbox.langchain, the drop-in for workflow-middleware 0.1.0, with langchain's own fake chat
models (offline): the same API and behaviour, with the scripts in flowbox's sandbox."""

import asyncio
import json
import signal
import subprocess
import sys
import textwrap

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.tools import tool as lc_tool
from pydantic import BaseModel

import flowbox
from flowbox.langchain import (
    BudgetConfig,
    FakeLeafBackend,
    LangChainLeafBackend,
    LeafBackend,
    LeafResult,
    MetaError,
    RunWorkflowToolSchema,
    ScriptError,
    SecurityError,
    WorkflowConfig,
    WorkflowMiddleware,
    get_workflow_guidance,
    run_workflow_script,
)

FANOUT = """
meta = {"name": "demo-fanout", "description": "Review a target from three angles"}

async def main():
    phase("Review")
    log(f"reviewing {args['target']}")
    findings = await parallel([
        (lambda d=d: agent(f"Review {args['target']} for {d}", label=d))
        for d in ("correctness", "security", "perf")
    ])
    return {"findings": [f for f in findings if f]}
"""


class ToolCallingFake(GenericFakeChatModel):
    """langchain's GenericFakeChatModel, accepting tools (it answers from its script)."""

    def bind_tools(self, tools, **kwargs):
        self.__dict__.setdefault("bound", []).append([getattr(t, "name", t) for t in tools])
        return self


def run_script(script, **options):
    options.setdefault("args", {})
    options.setdefault("backend", FakeLeafBackend())
    options.setdefault("config", WorkflowConfig())
    options.setdefault("thread_id", "test-thread")
    return asyncio.run(run_workflow_script(script, **options))


def test_the_readme_example_runs_as_it_does_on_workflow_middleware():
    result, summary = run_script(FANOUT, args={"target": "auth.py"}, thread_id="demo-1")
    assert result == {
        "findings": [
            "[leaf] Review auth.py for correctness",
            "[leaf] Review auth.py for security",
            "[leaf] Review auth.py for perf",
        ]
    }
    assert summary == {
        "agents_spawned": 3,
        "tokens_spent": 80,
        "phases": ["Review"],
        "logs": ["reviewing auth.py"],
    }


def test_the_event_sink_gets_phases_logs_and_matched_agent_events():
    events = []
    run_script(FANOUT, args={"target": "x"}, event_sink=events.append)
    types = [event["type"] for event in events]
    assert types.count("agent_start") == 3 and types.count("agent_end") == 3
    assert {"type": "phase", "index": 0, "title": "Review"} in events
    assert {"type": "log", "message": "reviewing x"} in events
    starts = {e["id"]: e for e in events if e["type"] == "agent_start"}
    for end in (e for e in events if e["type"] == "agent_end"):
        assert end["id"] in starts
        assert isinstance(end["tokens"], int) and end["text"].startswith("[leaf] Review x")
    assert {e["label"] for e in starts.values()} == {"correctness", "security", "perf"}


def test_a_broken_sink_never_breaks_the_run():
    def sink(event):
        raise RuntimeError("sink down")

    result, _ = run_script(FANOUT, args={"target": "x"}, event_sink=sink)
    assert len(result["findings"]) == 3


def test_structured_leaves_fill_a_json_schema():
    script = (
        "async def main():\n"
        "    return await agent('rate', schema={'type': 'object', 'properties': "
        "{'title': {'type': 'string'}, 'sev': {'type': 'integer'}, 'ok': {'type': 'boolean'}}, "
        "'required': ['title', 'sev', 'ok']})\n"
    )
    result, _ = run_script(script)
    assert result == {"title": "title", "sev": 0, "ok": False}


def test_a_pydantic_result_from_a_backend_reaches_the_script_as_json():
    class Finding(BaseModel):
        title: str
        sev: int

    class Backend:
        async def run(self, prompt, *, schema=None, agent_type=None, label=None):
            return LeafResult(text="t", structured=Finding(title="alpha", sev=4), tokens=3)

    assert isinstance(Backend(), LeafBackend)
    script = "return await agent('x', schema={'type': 'object'})"
    result, summary = run_script(script, backend=Backend())
    assert result == {"title": "alpha", "sev": 4}
    assert summary["tokens_spent"] == 3


def test_errors_map_onto_the_classes_its_users_catch():
    with pytest.raises(MetaError):
        run_script("meta = {'name': 1}\nreturn 1")
    with pytest.raises(MetaError):
        run_script("return (")
    with pytest.raises(SecurityError) as raised:
        run_script("async def main():\n    return ().__class__.__bases__")
    assert isinstance(raised.value, ScriptError)
    assert raised.value.flowbox_error.kind == "forbidden" and raised.value.flowbox_error.line == 2
    with pytest.raises(ScriptError, match="no entry point"):
        run_script("x = 1")
    with pytest.raises(ScriptError, match="ZeroDivisionError"):
        run_script("async def main():\n    return 1 / 0")


def test_limits_are_the_sandboxs():
    config = WorkflowConfig(limits=flowbox.Limits(fuel=20_000_000))
    with pytest.raises(ScriptError) as raised:
        run_script("async def main():\n    while True:\n        pass", config=config)
    assert raised.value.flowbox_error.kind == "out_of_fuel"


def test_the_agent_cap_and_the_token_budget_hold():
    capped = WorkflowConfig(max_agents_total=2)
    script = "async def main():\n    return await parallel([lambda i=i: agent(str(i)) for i in range(5)])"
    result, summary = run_script(script, config=capped)
    assert result.count(None) == 3 and summary["agents_spawned"] == 2
    budget = WorkflowConfig(budget=BudgetConfig(total=10), max_concurrency=1)
    script = (
        "async def main():\n"
        "    out = []\n"
        "    for i in range(5):\n"
        "        try:\n"
        "            out.append(await agent('0123456789'))\n"
        "        except BudgetExceeded:\n"
        "            out.append('over')\n"
        "    return [out, budget.total, budget.spent()]"
    )
    result, _ = run_script(script, config=budget)
    assert result[0][0].startswith("[leaf]") and "over" in result[0]
    assert result[1] == 10


def test_concurrency_is_bounded_by_max_concurrency():
    in_flight = most = 0

    class Slow:
        async def run(self, prompt, *, schema=None, agent_type=None, label=None):
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0.02)
            in_flight -= 1
            return LeafResult(prompt)

    script = "async def main():\n    return await parallel([lambda i=i: agent(str(i)) for i in range(10)])"
    run_script(script, backend=Slow(), config=WorkflowConfig(max_concurrency=2))
    assert most == 2


RESUMING = textwrap.dedent(
    """
    import asyncio, json, os, signal, sys
    from flowbox.langchain import LeafResult, WorkflowConfig, run_workflow_script

    journal, log, die_at = sys.argv[1:4]

    class Backend:
        async def run(self, prompt, *, schema=None, agent_type=None, label=None):
            if prompt == die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            with open(log, "a") as f:
                f.write(prompt + "\\n")
            return LeafResult(prompt.upper(), tokens=1)

    script = "async def main():\\n    return [await agent(p) for p in 'abcd']"
    result, summary = asyncio.run(run_workflow_script(
        script, args={}, backend=Backend(), config=WorkflowConfig(journal=journal), thread_id="t-1"))
    print(json.dumps([result, summary]))
    """
)


def test_a_journaled_thread_resumes_after_its_process_was_killed(tmp_path):
    def worker(die_at):
        command = [
            sys.executable,
            "-c",
            RESUMING,
            str(tmp_path / "j.db"),
            str(tmp_path / "log"),
            die_at,
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    killed = worker("c")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = worker("none")
    assert resumed.returncode == 0, resumed.stderr
    result, summary = json.loads(resumed.stdout)
    assert result == ["A", "B", "C", "D"] and summary["agents_spawned"] == 4
    # a and b came from the journal: the backend answered each leaf once.
    assert (tmp_path / "log").read_text().split() == ["a", "b", "c", "d"]
    again = worker("a")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)[0] == ["A", "B", "C", "D"]


# The middleware.


def test_the_middleware_adds_one_tool_with_the_locked_schema():
    middleware = WorkflowMiddleware(backend=FakeLeafBackend())
    (tool,) = middleware.tools
    assert tool.name == "run_workflow"
    assert tool.args_schema is RunWorkflowToolSchema
    assert set(RunWorkflowToolSchema.model_fields) == {"script", "args"}
    assert tool.description == flowbox._native.RUN_WORKFLOW_DESCRIPTION


def test_guidance_is_appended_never_replacing_the_system_prompt():
    middleware = WorkflowMiddleware(backend=FakeLeafBackend())
    original = SystemMessage("You are the operator's assistant.")
    appended = middleware._append_to_system_message(original, "GUIDE")
    texts = [block["text"] for block in appended.content_blocks]
    assert texts == ["You are the operator's assistant.", "\n\nGUIDE"]
    assert original.content == "You are the operator's assistant."
    guidance = get_workflow_guidance()
    assert "parallel" in guidance and "pipeline" in guidance
    assert len(get_workflow_guidance(include_patterns=True)) > len(guidance)
    assert get_workflow_guidance(override="X-OVERRIDE") == "X-OVERRIDE"


def test_an_agent_runs_a_workflow_through_the_tool_end_to_end():
    model = ToolCallingFake(
        messages=iter(
            [
                AIMessage(
                    content="",
                    tool_calls=[
                        {
                            "name": "run_workflow",
                            "args": {"script": FANOUT, "args": {"target": "T"}},
                            "id": "c1",
                        }
                    ],
                ),
                AIMessage(content="all reviewed"),
            ]
        )
    )
    events = []
    middleware = WorkflowMiddleware(backend=FakeLeafBackend(), event_sink=events.append)
    graph = create_agent(model, tools=[], system_prompt="BASE", middleware=[middleware])
    out = graph.invoke({"messages": [{"role": "user", "content": "review T with a workflow"}]})
    tool_message = out["messages"][2]
    assert json.loads(tool_message.content)["findings"][0] == "[leaf] Review T for correctness"
    assert out["messages"][-1].content == "all reviewed"
    (event,) = middleware.get_events()
    assert (event["kind"], event["detail"], event["agents_spawned"], event["phases"]) == (
        "run",
        "demo-fanout",
        3,
        ["Review"],
    )
    assert middleware.get_total_runs() == 1
    assert events[0] == {"type": "script", "script": FANOUT, "name": "demo-fanout"}
    # The guidance reached the model after the operator's prompt.
    system = middleware._last_request.system_message
    assert system.content_blocks[0]["text"] == "BASE"


def test_a_failed_workflow_is_reported_to_the_model_and_not_counted():
    middleware = WorkflowMiddleware(backend=FakeLeafBackend())
    output = asyncio.run(middleware._run("import os\nreturn 1", None, request=None))
    assert output.startswith("Workflow failed:") and "line 1" in output and "Hint:" in output
    assert middleware.get_events() == [] and middleware.get_total_runs() == 0


def test_runs_are_counted_per_conversation_thread():
    from langgraph.checkpoint.memory import InMemorySaver

    def model():
        return ToolCallingFake(
            messages=iter(
                [
                    AIMessage(
                        content="",
                        tool_calls=[
                            {"name": "run_workflow", "args": {"script": "return 1"}, "id": "c"}
                        ],
                    ),
                    AIMessage(content="ok"),
                ]
            )
        )

    middleware = WorkflowMiddleware(backend=FakeLeafBackend())
    for thread in ("conv-a", "conv-b", "conv-a"):
        graph = create_agent(
            model(), tools=[], middleware=[middleware], checkpointer=InMemorySaver()
        )
        graph.invoke(
            {"messages": [{"role": "user", "content": "go"}]},
            {"configurable": {"thread_id": thread}},
        )
    assert middleware.get_total_runs() == 3
    assert middleware.get_total_runs("conv-a") == 2 and middleware.get_total_runs("conv-b") == 1


def test_leaves_on_the_orchestrators_model_and_tools():
    @lc_tool
    def lookup(key: str) -> str:
        """Looks a key up."""
        return key.upper()

    leaf_model = ToolCallingFake(messages=iter([AIMessage(content="leaf says hi")]))
    backend = LangChainLeafBackend(model=leaf_model, tools=[lookup], system_prompt="OPERATOR")
    result, summary = run_script("return await agent('hello')", backend=backend)
    assert result == "leaf says hi"
    assert leaf_model.bound == [["lookup"]]
