"""End-to-end scenarios of `flowbox mcp`, driven by the official Python MCP SDK.

Run by host/cli/tests/mcp.rs as `python client.py SCENARIO`, with the flowbox binary in
FLOWBOX_BIN, a scratch directory in FLOWBOX_SCRATCH and the journal in FLOWBOX_DB. Each scenario
asserts what the client sees and exits non-zero (with a traceback) when something is off.
"""

import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

SCRATCH = Path(os.environ["FLOWBOX_SCRATCH"])


def backend_file(rules, **extra):
    """A scripted backend: leaves whose label matches a rule answer after its latency."""
    path = SCRATCH / "backend.json"
    config = {"seed": 1, "fallback": "fake", "call_log": str(SCRATCH / "calls.jsonl"), "rules": rules}
    config.update(extra)
    path.write_text(json.dumps(config))
    return path


def calls():
    """The prompts the backend was called with, in order."""
    log = SCRATCH / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@asynccontextmanager
async def server(*flags, **session_options):
    params = StdioServerParameters(
        command=os.environ["FLOWBOX_BIN"],
        args=["mcp", *flags],
        env={
            "FLOWBOX_DB": os.environ["FLOWBOX_DB"],
            "FLOWBOX_CACHE_DIR": os.environ["FLOWBOX_CACHE_DIR"],
        },
    )
    with open(SCRATCH / "server.stderr", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, **session_options) as session:
                yield session


def error_of(result):
    assert result.is_error is True, result
    error = result.structured_content["error"]
    # The text rendering carries the same error, for hosts that ignore structured content.
    assert json.loads(result.content[0].text)["error"] == error
    return error


FANOUT = """
meta = {"name": "fanout", "description": "review each item", "phases": [{"title": "review"}]}

async def main():
    phase("review")
    log("reviewing " + str(len(args["items"])) + " items")
    replies = await parallel([lambda item=item: agent("review " + item, label="review " + item)
                              for item in args["items"]])
    return {"count": len(replies), "big": 12345678901234567890, "exact": 0.1, "replies": replies}
"""


async def basics():
    logs = []

    async def on_log(params):
        logs.append(params)

    async with server(logging_callback=on_log) as session:
        init = await session.initialize()
        assert init.protocol_version == "2025-11-25", init.protocol_version
        assert init.server_info.name == "flowbox"
        assert "run_workflow" in init.instructions and "agent(" in init.instructions

        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert sorted(tools) == ["list_threads", "resume_workflow", "run_workflow", "show_thread"]
        run = tools["run_workflow"]
        assert run.description.startswith("Run a Python workflow script"), run.description
        assert "ONLY" in run.description
        assert run.input_schema["required"] == ["script"]
        assert run.output_schema["required"] == ["ok"]

        progress = []

        async def on_progress(value, total, message):
            progress.append((value, message))

        items = ["a", "b", "c", "d"]
        result = await session.call_tool(
            "run_workflow",
            {"script": FANOUT, "args": {"items": items}, "thread_id": "fanout-1"},
            progress_callback=on_progress,
        )
        assert result.is_error is not True, result
        out = result.structured_content
        assert out["ok"] is True, out
        assert out["result"]["count"] == 4
        assert out["result"]["big"] == 12345678901234567890
        assert out["result"]["exact"] == 0.1
        assert len(out["result"]["replies"]) == 4 and all(out["result"]["replies"])
        summary = out["summary"]
        assert summary["thread_id"] == "fanout-1" and summary["name"] == "fanout"
        assert summary["leaves"] == 4 and summary["tokens"] > 0, summary
        assert json.loads(result.content[0].text) == out
        # Progress: leaves start and finish under the phase; the values grow.
        values = [value for value, _ in progress]
        assert values == sorted(values) and len(set(values)) == len(values), progress
        messages = [message for _, message in progress]
        assert any(m.startswith("review · ") for m in messages), messages
        assert messages[-1].startswith("review · 4/4 leaves · "), messages
        assert messages[-1].endswith(" tokens"), messages
        # The script's log() line arrived as an MCP log message.
        assert any(entry.data == "reviewing 4 items" for entry in logs), logs
        assert all(entry.level == "info" and entry.logger == "flowbox" for entry in logs), logs

        # A script with an import: an isError result with the line and a hint, not a protocol
        # error.
        result = await session.call_tool("run_workflow", {"script": "x = 1\nimport os\nreturn x"})
        error = error_of(result)
        assert error["kind"] == "forbidden", error
        assert error["line"] == 2, error
        assert "import" in error["message"] and error["hint"], error

        # A script that fails while running: its exception and line.
        result = await session.call_tool("run_workflow", {"script": "x = 1\nreturn x / 0"})
        error = error_of(result)
        assert error["kind"] == "uncaught" and error["line"] == 2, error
        assert error["exception"] == "ZeroDivisionError", error

        # Bad inputs: each a clear answer, and the server goes on serving.
        try:
            await session.call_tool("no_such_tool", {})
        except MCPError as e:
            assert e.code == -32602 and "no_such_tool" in e.message, e
        else:
            raise AssertionError("an unknown tool was not refused")
        error = error_of(await session.call_tool("run_workflow", {}))
        assert error["kind"] == "invalid_arguments" and "script" in error["message"], error
        error = error_of(await session.call_tool("run_workflow", {"script": 5}))
        assert error["kind"] == "invalid_arguments" and "string" in error["message"], error
        error = error_of(await session.call_tool("run_workflow", {"script": "return 1", "bogus": 1}))
        assert error["kind"] == "invalid_arguments" and "bogus" in error["message"], error
        error = error_of(await session.call_tool("show_thread", {"thread_id": 7}))
        assert error["kind"] == "invalid_arguments", error
        error = error_of(await session.call_tool("run_workflow", {"script": "x = 1\n" * 40000}))
        assert error["kind"] == "script_too_large", error
        big_args = {"text": "y" * 1_100_000}
        error = error_of(await session.call_tool("run_workflow", {"script": "return 1", "args": big_args}))
        assert error["kind"] == "invalid_args" and "limit" in error["message"], error
        error = error_of(await session.call_tool("run_workflow", {"script": "return 1", "thread_id": "no spaces"}))
        assert error["kind"] == "invalid_thread_id", error

        # The threads, as `flowbox threads` and `flowbox show` print them.
        listing = await session.call_tool("list_threads", {})
        assert listing.is_error is not True, listing
        threads = {t["thread_id"]: t for t in listing.structured_content["threads"]}
        assert threads["fanout-1"]["status"] == "succeeded", threads["fanout-1"]
        assert listing.content[0].text.startswith("thread "), listing.content[0].text
        assert "fanout-1" in listing.content[0].text
        shown = await session.call_tool("show_thread", {"thread_id": "fanout-1"})
        assert shown.is_error is not True, shown
        assert len(shown.structured_content["entries"]) == 4
        assert shown.structured_content["outcome"]["result"]["big"] == 12345678901234567890
        assert "journal  4 completions" in shown.content[0].text, shown.content[0].text
        error = error_of(await session.call_tool("show_thread", {"thread_id": "missing"}))
        assert error["kind"] == "unknown_thread", error
        error = error_of(await session.call_tool("resume_workflow", {"thread_id": "missing"}))
        assert error["kind"] == "unknown_thread", error

        # A finished thread resumed: its recorded outcome, nothing runs again.
        before = len(calls())
        result = await session.call_tool("resume_workflow", {"thread_id": "fanout-1"})
        assert result.structured_content["ok"] is True and "note" in result.structured_content
        assert result.structured_content["result"]["big"] == 12345678901234567890
        assert len(calls()) == before


SLOW = """
first = await agent("first", label="first")
rest = await parallel([lambda i=i: agent("slow " + str(i), label="slow " + str(i)) for i in range(3)])
return {"first": first, "rest": rest}
"""


async def wait_for(predicate, what, seconds=30):
    with anyio.fail_after(seconds):
        while not predicate():
            await anyio.sleep(0.02)


async def cancel_and_resume():
    backend = backend_file([
        {"label": "^first$", "text": "first done", "latency_ms": 0},
        {"label": "^slow ", "text": "slow done", "latency_ms": 1500},
    ])
    flags = ["--backend", f"scripted:{backend}"]
    async with server(*flags) as session:
        await session.initialize()
        progress = []

        async def on_progress(value, total, message):
            progress.append(message)

        async with anyio.create_task_group() as group:
            cancel = anyio.CancelScope()

            async def slow_call():
                with cancel:
                    await session.call_tool(
                        "run_workflow", {"script": SLOW, "thread_id": "slow-1"},
                        progress_callback=on_progress,
                    )
                    raise AssertionError("the cancelled call answered")

            group.start_soon(slow_call)
            # Once the first leaf is done and the slow ones are running, cancel the call: the
            # SDK sends notifications/cancelled.
            await wait_for(lambda: any(m.startswith("1/4 leaves") for m in progress), "the slow leaves")
            # Two calls in flight at once: another completes while the slow one runs, and a
            # second run of the running thread is refused.
            quick = await session.call_tool("run_workflow", {"script": "return await agent('quick')"})
            assert quick.structured_content["ok"] is True, quick
            busy = await session.call_tool("resume_workflow", {"thread_id": "slow-1"})
            error = error_of(busy)
            assert error["kind"] == "thread_in_use", error
            cancel.cancel()

        # The journal keeps the finished leaf; the thread stays open and resumes from it.
        async def still_running():
            listing = await session.call_tool("list_threads", {})
            threads = {t["thread_id"]: t for t in listing.structured_content["threads"]}
            return threads["slow-1"]["status"]

        with anyio.fail_after(10):
            while True:
                shown = await session.call_tool("show_thread", {"thread_id": "slow-1"})
                if shown.structured_content["entries"]:
                    break
                await anyio.sleep(0.05)
        assert await still_running() == "running"
        firsts = [c for c in calls() if c.get("label") == "first"]
        assert len(firsts) == 1, calls()
        result = await session.call_tool("resume_workflow", {"thread_id": "slow-1"})
        out = result.structured_content
        assert out["ok"] is True, out
        assert out["result"] == {"first": "first done", "rest": ["slow done"] * 3}, out
        # The finished leaf was replayed from the journal, not called again.
        assert len([c for c in calls() if c.get("label") == "first"]) == 1, calls()


async def hostile_script():
    backend = backend_file([{"label": "^slow$", "text": "slow done", "latency_ms": 800}])
    async with server("--backend", f"scripted:{backend}", "--fuel", "100000000") as session:
        await session.initialize()
        results = {}

        async def call(name, script):
            results[name] = await session.call_tool("run_workflow", {"script": script})

        async with anyio.create_task_group() as group:
            group.start_soon(call, "slow", "return await agent('slow', label='slow')")
            group.start_soon(call, "bomb", "while True:\n    pass\nreturn 1")
            group.start_soon(call, "quick", "return 1 + 1")
        error = error_of(results["bomb"])
        assert error["kind"] == "out_of_fuel", error
        assert results["slow"].structured_content["result"] == "slow done", results["slow"]
        assert results["quick"].structured_content["result"] == 2, results["quick"]



async def hostile_memory_and_output():
    """A memory bomb and three output floods (a print loop, one huge log line, an oversize
    result), each in its own typed isError result while a good call completes; the server
    goes on serving."""
    backend = backend_file([{"label": "^slow$", "text": "slow done", "latency_ms": 800}])
    flags = ["--backend", f"scripted:{backend}", "--memory-mib", "48", "--max-output-bytes", "65536"]
    async with server(*flags) as session:
        await session.initialize()
        results = {}

        async def call(name, script):
            results[name] = await session.call_tool("run_workflow", {"script": script})

        async with anyio.create_task_group() as group:
            group.start_soon(call, "slow", "return await agent('slow', label='slow')")
            group.start_soon(call, "memory", "blocks = []\nwhile True:\n    blocks.append('x' * 1000000)\nreturn 1")
            group.start_soon(call, "prints", "while True:\n    print('flood ' * 100)\nreturn 1")
            group.start_soon(call, "log_line", "log('x' * 200000)\nreturn 1")
            group.start_soon(call, "result", "return 'x' * 2000000")
        assert error_of(results["memory"])["kind"] == "out_of_memory", results["memory"]
        assert error_of(results["prints"])["kind"] == "output_too_large", results["prints"]
        assert error_of(results["log_line"])["kind"] == "output_too_large", results["log_line"]
        assert error_of(results["result"])["kind"] == "result_too_large", results["result"]
        for name in ("memory", "prints", "log_line", "result"):
            assert error_of(results[name])["hint"], results[name]
        assert results["slow"].structured_content["result"] == "slow done", results["slow"]
        # The server keeps serving.
        after = await session.call_tool("run_workflow", {"script": "return await agent('slow', label='slow')"})
        assert after.structured_content["result"] == "slow done", after


@asynccontextmanager
async def http_session(**session_options):
    async with streamable_http_client(os.environ["FLOWBOX_URL"]) as (read, write):
        async with ClientSession(read, write, **session_options) as session:
            yield session


async def http():
    """Over Streamable HTTP: several clients at once, each its own session, with progress, log
    lines, isError results and a cancelled call that resumes."""
    progress = {}
    logs = []

    async def on_log(params):
        logs.append(params.data)

    async def client(name, items):
        async with http_session(logging_callback=on_log) as session:
            init = await session.initialize()
            assert init.protocol_version == "2025-11-25", init.protocol_version
            assert "run_workflow" in init.instructions
            tools = {tool.name for tool in (await session.list_tools()).tools}
            assert tools == {"list_threads", "resume_workflow", "run_workflow", "show_thread"}
            progress[name] = []

            async def on_progress(value, total, message):
                progress[name].append(message)

            result = await session.call_tool(
                "run_workflow",
                {"script": FANOUT, "args": {"items": items}, "thread_id": f"http-{name}"},
                progress_callback=on_progress,
            )
            out = result.structured_content
            assert out["ok"] is True, out
            assert out["result"]["count"] == len(items) and out["result"]["big"] == 12345678901234567890
            error = error_of(await session.call_tool("run_workflow", {"script": "import os\nreturn 1"}))
            assert error["kind"] == "forbidden" and error["line"] == 1, error

    async with anyio.create_task_group() as group:
        group.start_soon(client, "one", ["a", "b"])
        group.start_soon(client, "two", ["c", "d", "e"])
        group.start_soon(client, "three", ["f"])
    assert progress["two"][-1].startswith("review · 3/3 leaves"), progress
    assert progress["three"][-1].startswith("review · 1/1 leaves"), progress
    assert sorted(logs) == ["reviewing 1 items", "reviewing 2 items", "reviewing 3 items"], logs

    # A cancelled call over HTTP: the thread stays open, and another session resumes it.
    async with http_session() as session:
        await session.initialize()
        seen = []

        async def on_progress(value, total, message):
            seen.append(message)

        async with anyio.create_task_group() as group:
            cancel = anyio.CancelScope()

            async def slow_call():
                with cancel:
                    await session.call_tool(
                        "run_workflow", {"script": SLOW, "thread_id": "http-slow"},
                        progress_callback=on_progress,
                    )

            group.start_soon(slow_call)
            await wait_for(lambda: any(m.startswith("1/4 leaves") for m in seen), "the slow leaves")
            cancel.cancel()
    async with http_session() as session:
        await session.initialize()
        with anyio.fail_after(10):
            while True:
                busy = await session.call_tool("resume_workflow", {"thread_id": "http-slow"})
                if busy.structured_content["ok"]:
                    break
                # Until the cancelled run has let go of the thread, it is in use.
                assert busy.structured_content["error"]["kind"] == "thread_in_use", busy
                await anyio.sleep(0.1)
        assert busy.structured_content["result"]["first"] == "first done", busy
        assert len([c for c in calls() if c.get("label") == "first"]) == 1, calls()


SAMPLED = """
meta = {"name": "sampled", "description": "leaves on the host's model"}

async def main():
    verdict = await agent("Is 2 + 2 = 4?", label="judge", instruction="Answer briefly.",
                          schema={"type": "object", "properties": {"ok": {"type": "boolean"}},
                                  "required": ["ok"]})
    note = await agent("Say hi", model="fast")
    return {"verdict": verdict, "note": note}
"""


async def sampling():
    """--leaves sampling: each leaf turn a sampling/createMessage to this client."""
    received = []

    async def on_sample(context, params):
        received.append(params)
        system = params.system_prompt or ""
        if "JSON Schema" in system:
            # The first structured reply is not JSON: the server asks once more (repair).
            text = "certainly!" if sum("JSON Schema" in (p.system_prompt or "") for p in received) == 1 else '{"ok": true}'
        else:
            text = "hi from the host"
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=text), model="host-model"
        )

    flags = ["--leaves", "sampling", "--profile", "fast=small-model:cheap"]
    async with server(*flags, sampling_callback=on_sample) as session:
        init = await session.initialize()
        assert "sampling/createMessage" in init.instructions, init.instructions[-400:]
        result = await session.call_tool("run_workflow", {"script": SAMPLED, "thread_id": "sampled-1"})
        out = result.structured_content
        assert out["ok"] is True, out
        assert out["result"] == {"verdict": {"ok": True}, "note": "hi from the host"}, out
        assert out["summary"]["tokens"] > 0, out
        # The callback reports no usage: every token is an estimate, and the summary says so.
        assert out["summary"]["estimated_tokens"] == out["summary"]["tokens"], out
        # What the callback received: the schema request, then its repair, then the plain leaf.
        assert len(received) == 3, received
        first, repair, plain = received
        assert "Answer briefly." in first.system_prompt, first.system_prompt
        assert '"required": ["ok"]' in first.system_prompt or '"required":["ok"]' in first.system_prompt, first.system_prompt
        assert first.messages[0].role == "user"
        assert "Is 2 + 2 = 4?" in first.messages[0].content.text, first.messages
        assert [m.role for m in repair.messages] == ["user", "assistant", "user"], repair.messages
        assert repair.messages[1].content.text == "certainly!"
        assert "JSON Schema" not in plain.system_prompt
        assert plain.messages[0].content.text == "Say hi", plain.messages
        assert [h.name for h in plain.model_preferences.hints] == ["small-model"], plain.model_preferences
        assert [h.name for h in first.model_preferences.hints] == ["host"], first.model_preferences
        # The journal keeps which counts are estimates; `flowbox show` marks them with `~`.
        shown = await session.call_tool("show_thread", {"thread_id": "sampled-1"})
        entries = shown.structured_content["entries"]
        assert entries and all(e["estimated_tokens"] > 0 for e in entries), entries
        assert " tok " in shown.content[0].text and "~" in shown.content[0].text, shown.content[0].text
        # Journaled like any leaf: the finished thread answers from the journal, no sampling.
        result = await session.call_tool("resume_workflow", {"thread_id": "sampled-1"})
        assert result.structured_content["result"] == out["result"], result
        assert len(received) == 3

    # A client without the sampling capability: a clear error at the first leaf.
    async with server(*flags) as session:
        await session.initialize()
        error = error_of(await session.call_tool("run_workflow", {"script": SAMPLED}))
        assert "sampling capability" in error["message"], error
        assert error["line"] == 5, error



async def on_sample_echo(context, params):
    """A sampling callback answering every leaf with what it was asked; it reports its token
    usage in `_meta` for the prompts that start with "counted"."""
    asked = params.messages[-1].content.text
    meta = {"usage": {"inputTokens": 1000, "outputTokens": 7}} if asked.startswith("counted") else None
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="host says: " + asked), model="host-model",
        _meta=meta,
    )


async def http_sampling():
    """--leaves sampling over Streamable HTTP: the server's sampling/createMessage requests
    reach this session's callback, and each leaf's answer is the callback's."""
    received = []

    async def on_sample(context, params):
        received.append(params)
        return await on_sample_echo(context, params)

    script = "return await parallel([lambda q=q: agent(q, instruction='Be brief.') for q in args['qs']])"
    async with http_session(sampling_callback=on_sample) as session:
        init = await session.initialize()
        assert "sampling/createMessage" in init.instructions, init.instructions[-400:]
        result = await session.call_tool("run_workflow", {"script": script, "args": {"qs": ["counted", "two"]}})
        out = result.structured_content
        assert out["ok"] is True, out
        assert out["result"] == ["host says: counted", "host says: two"], out
        assert sorted(p.messages[0].content.text for p in received) == ["counted", "two"], received
        assert all("Be brief." in p.system_prompt for p in received), received
        # One leaf's usage was reported, the other's estimated; the summary says which part.
        summary = out["summary"]
        assert summary["estimated_tokens"] > 0, summary
        assert summary["tokens"] - summary["estimated_tokens"] == 1007, summary
        assert '"estimated_tokens"' in result.content[0].text, result.content[0].text
        # Every leaf reported: nothing is estimated, and the summary says nothing of it.
        result = await session.call_tool("run_workflow", {"script": script, "args": {"qs": ["counted a", "counted b"]}})
        summary = result.structured_content["summary"]
        assert summary["tokens"] == 2014 and "estimated_tokens" not in summary, summary
    # A session without the capability, on the same server: a clear error at the first leaf.
    async with http_session() as session:
        await session.initialize()
        error = error_of(await session.call_tool("run_workflow", {"script": "return await agent('x')"}))
        assert "sampling capability" in error["message"], error


async def sampling_resume():
    """A sampling run cancelled while its second leaf waits on the client, then resumed: the
    first leaf comes from the journal, and the resumed run's summary counts its tokens as the
    estimates they were, as a run from scratch does."""
    asked = []
    waiting = anyio.Event()
    hold = {"second": True}

    async def on_sample(context, params):
        text = params.messages[-1].content.text
        asked.append(text)
        if text == "second leaf" and hold["second"]:
            waiting.set()
            await anyio.sleep_forever()
        return await on_sample_echo(context, params)

    script = "a = await agent('first leaf')\nb = await agent('second leaf')\nreturn [a, b]"
    async with server("--leaves", "sampling", sampling_callback=on_sample) as session:
        await session.initialize()
        async with anyio.create_task_group() as group:
            cancel = anyio.CancelScope()

            async def held_call():
                with cancel:
                    await session.call_tool("run_workflow", {"script": script, "thread_id": "held-1"})

            group.start_soon(held_call)
            with anyio.fail_after(30):
                await waiting.wait()
            cancel.cancel()
        hold["second"] = False
        with anyio.fail_after(30):
            while True:
                resumed = await session.call_tool("resume_workflow", {"thread_id": "held-1"})
                if resumed.structured_content["ok"]:
                    break
                assert resumed.structured_content["error"]["kind"] == "thread_in_use", resumed
                await anyio.sleep(0.1)
        out = resumed.structured_content
        assert out["result"] == ["host says: first leaf", "host says: second leaf"], out
        assert asked.count("first leaf") == 1, asked
        fresh = await session.call_tool("run_workflow", {"script": script, "thread_id": "fresh-1"})
        expected = fresh.structured_content["summary"]
        assert expected["estimated_tokens"] == expected["tokens"] > 0, expected
        summary = out["summary"]
        assert (summary["tokens"], summary["estimated_tokens"]) == (expected["tokens"], expected["tokens"]), (summary, expected)


SCENARIOS = {
    "basics": basics,
    "cancel_and_resume": cancel_and_resume,
    "hostile_script": hostile_script,
    "hostile_memory_and_output": hostile_memory_and_output,
    "http": http,
    "http_sampling": http_sampling,
    "sampling": sampling,
    "sampling_resume": sampling_resume,
}

if __name__ == "__main__":
    anyio.run(SCENARIOS[sys.argv[1]])
    print(f"{sys.argv[1]}: ok")
