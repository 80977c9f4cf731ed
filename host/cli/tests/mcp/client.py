"""End-to-end scenarios of `flowbox mcp`, driven by the official Python MCP SDK.

Run by host/cli/tests/all/mcp.rs as `python client.py SCENARIO`, with the flowbox binary in
FLOWBOX_BIN, a scratch directory in FLOWBOX_SCRATCH and the journal in FLOWBOX_DB. Each scenario
asserts what the client sees and exits non-zero (with a traceback) when something is off.
"""

import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client, ClientSession
from mcp.client.extension import ClientExtension, ResultClaim
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

async def resume_when_free(session, thread_id, seconds=10):
    """`resume_workflow` of a thread whose cancelled run may not have let go of it yet (until
    then it is in use), retried until it answers."""
    with anyio.fail_after(seconds):
        while True:
            result = await session.call_tool("resume_workflow", {"thread_id": thread_id})
            if result.structured_content["ok"]:
                return result
            assert result.structured_content["error"]["kind"] == "thread_in_use", result
            await anyio.sleep(0.1)

@asynccontextmanager
async def slow_run(session, thread_id):
    """Runs SLOW on `thread_id` in the background; the body runs once its first leaf is done
    and the slow ones are running, and then the call is cancelled (the SDK sends
    notifications/cancelled)."""
    progress = []

    async def on_progress(value, total, message):
        progress.append(message)

    async with anyio.create_task_group() as group:
        cancel = anyio.CancelScope()

        async def slow_call():
            with cancel:
                await session.call_tool(
                    "run_workflow", {"script": SLOW, "thread_id": thread_id},
                    progress_callback=on_progress,
                )
                raise AssertionError("the cancelled call answered")

        group.start_soon(slow_call)
        await wait_for(lambda: any(m.startswith("1/4 leaves") for m in progress), "the slow leaves")
        yield
        cancel.cancel()


async def cancel_and_resume():
    # The slow leaves outlast the two calls made while they run, on a loaded machine too.
    backend = backend_file([
        {"label": "^first$", "text": "first done", "latency_ms": 0},
        {"label": "^slow ", "text": "slow done", "latency_ms": 3000},
    ])
    flags = ["--backend", f"scripted:{backend}"]
    async with server(*flags) as session:
        await session.initialize()
        async with slow_run(session, "slow-1"):
            # Two calls in flight at once: another completes while the slow one runs, and a
            # second run of the running thread is refused.
            quick = await session.call_tool("run_workflow", {"script": "return await agent('quick')"})
            assert quick.structured_content["ok"] is True, quick
            busy = await session.call_tool("resume_workflow", {"thread_id": "slow-1"})
            error = error_of(busy)
            assert error["kind"] == "thread_in_use", error

        # The journal keeps the finished leaf; the thread stays open, held by no run now, and
        # resumes from it.
        async def status_of_slow():
            listing = await session.call_tool("list_threads", {})
            threads = {t["thread_id"]: t for t in listing.structured_content["threads"]}
            return threads["slow-1"]["status"]

        with anyio.fail_after(10):
            while True:
                shown = await session.call_tool("show_thread", {"thread_id": "slow-1"})
                if shown.structured_content["entries"]:
                    break
                await anyio.sleep(0.05)
        assert await status_of_slow() == "resumable"
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
        async with slow_run(session, "http-slow"):
            pass
    async with http_session() as session:
        await session.initialize()
        busy = await resume_when_free(session, "http-slow", seconds=10)
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
        resumed = await resume_when_free(session, "held-1", seconds=30)
        out = resumed.structured_content
        assert out["result"] == ["host says: first leaf", "host says: second leaf"], out
        assert asked.count("first leaf") == 1, asked
        fresh = await session.call_tool("run_workflow", {"script": script, "thread_id": "fresh-1"})
        expected = fresh.structured_content["summary"]
        assert expected["estimated_tokens"] == expected["tokens"] > 0, expected
        summary = out["summary"]
        assert (summary["tokens"], summary["estimated_tokens"]) == (expected["tokens"], expected["tokens"]), (summary, expected)
def stdio_params(*flags):
    return StdioServerParameters(
        command=os.environ["FLOWBOX_BIN"],
        args=["mcp", *flags],
        env={
            "FLOWBOX_DB": os.environ["FLOWBOX_DB"],
            "FLOWBOX_CACHE_DIR": os.environ["FLOWBOX_CACHE_DIR"],
        },
    )


@asynccontextmanager
async def stateless(*flags, **client_options):
    """A client of the stateless 2026-07-28 revision: no initialize; `mode="auto"` finds the
    revision with server/discover."""
    with open(SCRATCH / "server.stderr", "a") as errlog:
        transport = stdio_client(stdio_params(*flags), errlog=errlog)
        async with Client(transport, mode="auto", **client_options) as client:
            assert client.protocol_version == "2026-07-28", client.protocol_version
            yield client


async def stateless_basics():
    """2026-07-28: discover, list tools, a fan-out run with its structured result, progress,
    and isError results, with self-contained requests."""
    async with stateless() as client:
        assert "run_workflow" in client.instructions and "agent(" in client.instructions
        assert client.server_capabilities.tools is not None
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == ["list_threads", "resume_workflow", "run_workflow", "show_thread"]
        assert tools["run_workflow"].output_schema["required"] == ["ok"]

        progress = []

        async def on_progress(value, total, message):
            progress.append(message)

        items = ["a", "b", "c"]
        result = await client.call_tool(
            "run_workflow",
            {"script": FANOUT, "args": {"items": items}, "thread_id": "stateless-1"},
            progress_callback=on_progress,
        )
        out = result.structured_content
        assert result.is_error is not True and out["ok"] is True, out
        assert out["result"]["count"] == 3 and out["result"]["big"] == 12345678901234567890
        assert out["result"]["exact"] == 0.1
        assert out["summary"]["thread_id"] == "stateless-1" and out["summary"]["leaves"] == 3
        assert json.loads(result.content[0].text) == out
        assert progress and progress[-1].startswith("review · 3/3 leaves · "), progress

        error = error_of(await client.call_tool("run_workflow", {"script": "x = 1\nimport os\nreturn x"}))
        assert error["kind"] == "forbidden" and error["line"] == 2, error
        error = error_of(await client.call_tool("run_workflow", {"script": 5}))
        assert error["kind"] == "invalid_arguments", error
        shown = await client.call_tool("show_thread", {"thread_id": "stateless-1"})
        assert len(shown.structured_content["entries"]) == 3, shown
        # Without --leaves sampling no call asks for input, so none takes answers.
        try:
            await client.session.call_tool("run_workflow", {"script": "return 1"}, request_state="x")
        except MCPError as e:
            assert e.code == -32602 and "asks for no input" in e.message, e
        else:
            raise AssertionError("a requestState was accepted by a call that asks for no input")


# A schema leaf first, then a fan-out of three: the first batch asks for the schema leaf, the
# second (after a reply that is not JSON) for its repair, the third for the three at once.
BATCHED = """
meta = {"name": "batched", "description": "leaves on the host's model, in batches"}

async def main():
    verdict = await agent("Is 2 + 2 = 4?", label="judge", instruction="Answer briefly.",
                          schema={"type": "object", "properties": {"ok": {"type": "boolean"}},
                                  "required": ["ok"]})
    notes = await parallel([lambda i=i: agent("Say hi " + str(i), model="fast") for i in range(3)])
    return {"verdict": verdict, "notes": notes}
"""

SAMPLING_FLAGS = ["--leaves", "sampling", "--profile", "fast=small-model:cheap"]


def answer(text):
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text=text), model="host-model"
    )


def host_model(received):
    """A sampling callback: the first structured reply is not JSON, so the leaf asks again."""

    async def on_sample(context, params):
        received.append(params)
        if "JSON Schema" in (params.system_prompt or ""):
            schema_turns = sum("JSON Schema" in (p.system_prompt or "") for p in received)
            return answer("certainly!" if schema_turns == 1 else '{"ok": true}')
        return answer("hi from the host: " + params.messages[0].content.text)

    return on_sample


async def stateless_sampling():
    """--leaves sampling under 2026-07-28: the leaves' requests come back in input-required
    batches, which the SDK answers with its sampling callback and retries."""
    received = []
    async with stateless(*SAMPLING_FLAGS, sampling_callback=host_model(received)) as client:
        assert "sampling" in client.instructions, client.instructions[-400:]
        result = await client.call_tool("run_workflow", {"script": BATCHED, "thread_id": "batched-1"})
        out = result.structured_content
        assert out["ok"] is True, out
        assert out["result"] == {
            "verdict": {"ok": True},
            "notes": ["hi from the host: Say hi 0", "hi from the host: Say hi 1", "hi from the host: Say hi 2"],
        }, out
        assert out["summary"]["leaves"] == 4 and out["summary"]["tokens"] > 0, out
        first, repair, *plain = received
        assert "Answer briefly." in first.system_prompt and "JSON Schema" in first.system_prompt
        assert '"required":["ok"]' in first.system_prompt.replace(" ", ""), first.system_prompt
        assert [m.content.text for m in first.messages] == ["Is 2 + 2 = 4?"], first.messages
        assert [m.role for m in repair.messages] == ["user", "assistant", "user"], repair.messages
        assert repair.messages[1].content.text == "certainly!"
        assert sorted(m.messages[0].content.text for m in plain) == ["Say hi 0", "Say hi 1", "Say hi 2"]
        assert all([h.name for h in p.model_preferences.hints] == ["small-model"] for p in plain)
        assert [h.name for h in first.model_preferences.hints] == ["host"]
        # The leaves are journaled like any: the finished thread answers from its journal.
        again = await client.call_tool("resume_workflow", {"thread_id": "batched-1"})
        assert again.structured_content["result"] == out["result"], again
        assert len(received) == 5
        shown = await client.call_tool("show_thread", {"thread_id": "batched-1"})
        assert len(shown.structured_content["entries"]) == 4, shown.structured_content

        # One round trip at a time, below the SDK's driver: what each batch holds.
        session = client.session

        async def call(arguments=None, **retry):
            return await session.call_tool(
                "run_workflow", arguments or {"script": BATCHED, "thread_id": "batched-2"},
                allow_input_required=True, **retry,
            )

        batch = await call()
        assert isinstance(batch, types.InputRequiredResult), batch
        assert list(batch.input_requests) == ["leaf-1-turn-1"], batch.input_requests
        asked = batch.input_requests["leaf-1-turn-1"]
        assert asked.method == "sampling/createMessage"
        assert "Answer briefly." in asked.params.system_prompt
        assert "JSON Schema" in asked.params.system_prompt
        assert asked.params.messages[0].content.text == "Is 2 + 2 = 4?"
        # A reply that is not JSON: the next batch is the repair turn, which repeats the
        # exchange so far.
        repair = await call(input_responses={"leaf-1-turn-1": answer("certainly!")},
                            request_state=batch.request_state)
        assert list(repair.input_requests) == ["leaf-1-turn-2"], repair.input_requests
        texts = [m.content.text for m in repair.input_requests["leaf-1-turn-2"].params.messages]
        assert texts[:2] == ["Is 2 + 2 = 4?", "certainly!"] and "JSON Schema" in texts[2], texts
        fanout = await call(input_responses={"leaf-1-turn-2": answer('{"ok": true}')},
                            request_state=repair.request_state)
        # The fan-out's three leaves wait at once: one batch holds them all.
        assert sorted(fanout.input_requests) == ["leaf-2-turn-1", "leaf-3-turn-1", "leaf-4-turn-1"], fanout
        for key, i in [("leaf-2-turn-1", 0), ("leaf-3-turn-1", 1), ("leaf-4-turn-1", 2)]:
            params = fanout.input_requests[key].params
            assert params.messages[0].content.text == f"Say hi {i}", params.messages
            assert "JSON Schema" not in params.system_prompt
            assert [h.name for h in params.model_preferences.hints] == ["small-model"]
        # The judge is in the journal now: a replay, not a question.
        shown = await client.call_tool("show_thread", {"thread_id": "batched-2"})
        assert len(shown.structured_content["entries"]) == 1, shown.structured_content
        # The same retry sent twice: its answers are journaled already, the same batch comes.
        twice = await call(input_responses={"leaf-1-turn-2": answer('{"ok": true}')},
                           request_state=repair.request_state)
        assert twice.input_requests == fanout.input_requests and twice.request_state == fanout.request_state

        # Bad retries: clear protocol errors, and the thread is untouched.
        async def refused(expected, arguments=None, **retry):
            try:
                await call(arguments, **retry)
            except MCPError as e:
                assert e.code == -32602 and expected in e.message, e
                return e.message
            raise AssertionError(f"a bad retry was accepted: {retry}")

        answers = {key: answer("x") for key in fanout.input_requests}
        message = await refused("missing: leaf-4-turn-1", request_state=fanout.request_state,
                                input_responses={k: v for k, v in answers.items() if k != "leaf-4-turn-1"})
        assert "asked: leaf-2-turn-1, leaf-3-turn-1, leaf-4-turn-1" in message, message
        await refused("not asked: leaf-9-turn-1", request_state=fanout.request_state,
                      input_responses={**answers, "leaf-9-turn-1": answer("x")})
        await refused("not one this server issued", request_state="forged", input_responses=answers)
        await refused("not one this server issued", request_state=fanout.request_state[:-2] + "zz",
                      input_responses=answers)
        await refused("without a requestState", input_responses=answers)
        elsewhere = bytes.fromhex(fanout.request_state).decode().replace("batched-2", "missing-thread")
        await refused("names thread missing-thread, which is not in this server's journal",
                      {"script": BATCHED}, request_state=elsewhere.encode().hex(),
                      input_responses=answers)
        await refused("of thread batched-2, but the call names thread other",
                      {"script": BATCHED, "thread_id": "other"},
                      request_state=fanout.request_state, input_responses=answers)
        # A retry with another script than the thread's: the run's own divergence error.
        error = error_of(await call({"script": "return 1"}, request_state=fanout.request_state,
                                    input_responses=answers))
        assert error["kind"] == "divergence" and "not the one thread batched-2" in error["message"], error

        done = await call(input_responses={k: answer(f"note {k}") for k in fanout.input_requests},
                          request_state=fanout.request_state)
        assert isinstance(done, types.CallToolResult), done
        out = done.structured_content
        assert out["ok"] is True, out
        assert out["result"] == {"verdict": {"ok": True},
                                 "notes": ["note leaf-2-turn-1", "note leaf-3-turn-1", "note leaf-4-turn-1"]}, out
        # A retry of the last round after the end: the recorded outcome.
        late = await call(input_responses={k: answer("late") for k in fanout.input_requests},
                          request_state=fanout.request_state)
        assert late.structured_content["result"] == out["result"], late

        # The journal is the state: a client that lost the requestState resumes the thread and
        # is asked the same batch again; its answers go back with resume_workflow's retry.
        lost = await call({"script": BATCHED, "thread_id": "batched-3"})
        resumed = await session.call_tool("resume_workflow", {"thread_id": "batched-3"},
                                          allow_input_required=True)
        assert resumed.input_requests == lost.input_requests, resumed
        onward = await session.call_tool(
            "resume_workflow", {"thread_id": "batched-3"}, allow_input_required=True,
            request_state=resumed.request_state,
            input_responses={"leaf-1-turn-1": answer('{"ok": false}')},
        )
        assert sorted(onward.input_requests) == ["leaf-2-turn-1", "leaf-3-turn-1", "leaf-4-turn-1"], onward

    # A 2026-07-28 client without the sampling capability: a clear error at the first leaf.
    async with stateless(*SAMPLING_FLAGS) as client:
        error = error_of(await client.call_tool("run_workflow", {"script": BATCHED}))
        assert "sampling capability" in error["message"], error
        assert error["line"] == 5, error


async def stateless_slots():
    """A fan-out wider than the concurrency limit: each batch holds the leaves that hold a
    slot, and the next ones start as the answered ones finish."""
    script = "return await parallel([lambda i=i: agent('item ' + str(i)) for i in range(5)])"
    async with stateless(*SAMPLING_FLAGS, "--max-concurrency", "2", sampling_callback=host_model([])) as client:
        session = client.session
        sizes = []
        retry = {}
        while True:
            result = await session.call_tool("run_workflow", {"script": script, "thread_id": "slots-1"},
                                             allow_input_required=True, **retry)
            if not isinstance(result, types.InputRequiredResult):
                break
            sizes.append(sorted(result.input_requests))
            retry = {"request_state": result.request_state,
                     "input_responses": {k: answer("done " + r.params.messages[0].content.text)
                                         for k, r in result.input_requests.items()}}
        assert sizes == [["leaf-1-turn-1", "leaf-2-turn-1"], ["leaf-3-turn-1", "leaf-4-turn-1"],
                         ["leaf-5-turn-1"]], sizes
        assert result.structured_content["result"] == [f"done item {i}" for i in range(5)], result


async def stateless_http():
    """2026-07-28 over Streamable HTTP, two clients at once, their leaves answered through
    input-required batches."""
    async def client(name, count):
        received = []
        async with Client(os.environ["FLOWBOX_URL"], mode="auto", sampling_callback=host_model(received)) as c:
            assert c.protocol_version == "2026-07-28", c.protocol_version
            tools = {tool.name for tool in (await c.list_tools()).tools}
            assert "run_workflow" in tools, tools
            script = f"return await parallel([lambda i=i: agent('{name} ' + str(i)) for i in range({count})])"
            result = await c.call_tool("run_workflow", {"script": script, "thread_id": f"http-{name}"})
            assert result.structured_content["result"] == [
                f"hi from the host: {name} {i}" for i in range(count)
            ], result
            assert len(received) == count, received

    async with anyio.create_task_group() as group:
        group.start_soon(client, "one", 2)
        group.start_soon(client, "two", 3)


async def stateless_cancel():
    """A 2026-07-28 call cancelled mid-run: its thread stays open and resumes from its journal."""
    backend = backend_file([
        {"label": "^first$", "text": "first done", "latency_ms": 0},
        {"label": "^slow ", "text": "slow done", "latency_ms": 1500},
    ])
    async with stateless("--backend", f"scripted:{backend}") as client:
        async with slow_run(client, "slow-2026"):
            pass
        result = await resume_when_free(client, "slow-2026", seconds=10)
        out = result.structured_content
        # Resumed, not a recorded outcome: the run was cancelled before it finished.
        assert "note" not in out and out["result"] == {"first": "first done", "rest": ["slow done"] * 3}, out
        assert len([c for c in calls() if c.get("label") == "first"]) == 1, calls()


# The tasks extension (SEP-2663), client side: the SDK's extension mechanism claims the
# `resultType: "task"` handle of a tools/call, and tasks/get, tasks/update and tasks/cancel go
# out through ClientSession.send_request (the SDK's typed task requests are the 2025-11-25
# experimental ones, whose shapes differ).
TASKS = "io.modelcontextprotocol/tasks"


class TaskHandle(types.Result):
    """A CreateTaskResult: the seed state of a task, flattened."""

    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class TaskIdParams(types.RequestParams):
    task_id: str


class TaskUpdateParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTask(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class UpdateTask(types.Request[TaskUpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class TaskState(types.Result):
    """A tasks/get result: the task, with its input requests, result or error by status."""

    model_config = {"extra": "allow"}
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Ack(types.Result):
    model_config = {"extra": "forbid"}
    result_type: Literal["complete"]


async def get_task(session, task_id):
    return await session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), TaskState)


async def cancel_task(session, task_id):
    return await session.send_request(CancelTask(params=TaskIdParams(task_id=task_id)), Ack)


async def update_task(session, task_id, responses):
    params = TaskUpdateParams(task_id=task_id, input_responses=responses)
    return await session.send_request(UpdateTask(params=params), Ack)


async def until_terminal(session, task_id, seen=None):
    """Polls a task until it ends, noting each state it was seen in."""
    with anyio.fail_after(60):
        while True:
            state = await get_task(session, task_id)
            if seen is not None:
                seen.append(state)
            if state.status in ("completed", "failed", "cancelled"):
                return state
            await anyio.sleep((state.poll_interval_ms or 100) / 1000)


def iso_ms(text):
    """Milliseconds since the epoch of an ISO 8601 UTC time."""
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def tool_result(state):
    assert state.status == "completed", state
    return types.CallToolResult.model_validate(state.result)


class Tasks(ClientExtension):
    """Declares the tasks extension; a claimed task handle is polled to its tool result, so
    `client.call_tool` answers as if the call had been direct."""

    identifier = TASKS

    def claims(self):
        async def resolve(handle, context):
            return tool_result(await until_terminal(context.session, handle.task_id))

        return [ResultClaim(result_type="task", model=TaskHandle, resolve=resolve)]


async def expect_error(call, code, text):
    try:
        await call
    except MCPError as e:
        assert e.code == code and text in e.message, (e.code, e.message)
        return e.message
    raise AssertionError(f"no error {code} ({text})")


async def tasks_basics():
    """The tasks extension: a long fan-out run as a task, polled through working (with the
    progress line as its status message) to its structured result; the same result
    transparently through the SDK's claim; the errors of bad task requests; and, after a
    restart, the journal answering for the finished task."""
    backend = backend_file([{"label": "^review ", "text": "looks fine", "latency_ms": 400}])
    flags = ["--backend", f"scripted:{backend}", "--max-concurrency", "2"]
    items = ["a", "b", "c", "d", "e", "f"]
    arguments = {"script": FANOUT, "args": {"items": items}, "thread_id": "task-1"}
    async with stateless(*flags, extensions=[Tasks()]) as client:
        assert TASKS in (client.server_capabilities.extensions or {}), client.server_capabilities
        session = client.session
        handle = await session.call_tool("run_workflow", arguments, allow_claimed=True)
        assert isinstance(handle, TaskHandle), handle
        assert handle.task_id == "task-1" and handle.status == "working", handle
        assert handle.ttl_ms == 3600 * 1000 and handle.poll_interval_ms > 0, handle
        seen = []
        final = await until_terminal(session, "task-1", seen)
        messages = [s.status_message for s in seen if s.status == "working" and s.status_message]
        assert any(m.startswith("review · ") and "/6 leaves" in m for m in messages), messages
        result = tool_result(final)
        out = result.structured_content
        assert result.is_error is not True and out["ok"] is True, out
        assert out["result"]["count"] == 6 and out["result"]["replies"] == ["looks fine"] * 6, out
        assert out["result"]["big"] == 12345678901234567890 and out["result"]["exact"] == 0.1
        assert out["summary"]["thread_id"] == "task-1" and out["summary"]["leaves"] == 6, out
        assert json.loads(result.content[0].text) == out
        assert final.created_at <= final.last_updated_at and final.created_at.endswith("Z"), final
        # Through the SDK's claim the caller gets the tool result as from a direct call.
        direct = await client.call_tool("run_workflow", {"script": FANOUT, "args": {"items": ["x"]}})
        assert direct.structured_content["result"]["replies"] == ["looks fine"], direct
        # A rejected script is a completed task whose result is the isError result.
        rejected = tool_result(await until_terminal(session, (await session.call_tool(
            "run_workflow", {"script": "import os", "thread_id": "task-bad"}, allow_claimed=True)).task_id))
        error = error_of(rejected)
        assert error["kind"] == "forbidden" and error["line"] == 1, error
        # Calls that are not long still answer directly.
        listing = await session.call_tool("list_threads", {}, allow_claimed=True)
        assert isinstance(listing, types.CallToolResult), listing

        await expect_error(get_task(session, "no-such-task"), -32602, 'no task "no-such-task"')
        await expect_error(cancel_task(session, "no-such-task"), -32602, 'no task "no-such-task"')
        await expect_error(cancel_task(session, "task-1"), -32602, "already completed")
        await expect_error(update_task(session, "task-1", {}), -32602, "asks for no input")
        # A task's answers come with tasks/update, never with a retry's requestState.
        await expect_error(session.call_tool("run_workflow", {"script": "return 1"}, request_state="x",
                                             allow_claimed=True), -32602, "tasks/update")

    # A new server: the journal answers for the finished task, with the same result.
    async with stateless(*flags, extensions=[Tasks()]) as client:
        again = await get_task(client.session, "task-1")
        restored = tool_result(again)
        assert restored.structured_content == out, (restored.structured_content, out)
        # Its times are the journal's: the thread's creation and its end.
        # (The thread's header is written once the task that runs it exists.)
        assert iso_ms(final.created_at) <= iso_ms(again.created_at) <= iso_ms(again.last_updated_at), again
        await expect_error(cancel_task(client.session, "task-1"), -32602, "already finished")
    # A client that does not declare the extension gets the result directly.
    async with stateless(*flags) as client:
        plain = await client.session.call_tool("run_workflow", {"script": "return 2"})
        assert isinstance(plain, types.CallToolResult) and plain.structured_content["result"] == 2, plain
        await expect_error(get_task(client.session, "task-1"), -32021, "")


async def tasks_cancel():
    """A task cancelled mid-run with tasks/cancel: it reports cancelled, its thread stays in
    the journal, and resume_workflow (as a task too) continues it."""
    backend = backend_file([
        {"label": "^first$", "text": "first done", "latency_ms": 0},
        {"label": "^slow ", "text": "slow done", "latency_ms": 1500},
    ])
    async with stateless("--backend", f"scripted:{backend}", extensions=[Tasks()]) as client:
        session = client.session
        handle = await session.call_tool("run_workflow", {"script": SLOW, "thread_id": "slow-task"},
                                         allow_claimed=True)
        with anyio.fail_after(30):
            while True:
                state = await get_task(session, handle.task_id)
                if (state.status_message or "").startswith("1/4 leaves"):
                    break
                assert state.status == "working", state
                await anyio.sleep(0.02)
        ack = await cancel_task(session, "slow-task")
        assert ack.result_type == "complete", ack
        state = await get_task(session, "slow-task")
        assert state.status == "cancelled" and "resume_workflow" in state.status_message, state
        await expect_error(cancel_task(session, "slow-task"), -32602, "already cancelled")
        result = await resume_when_free(client, "slow-task", seconds=10)
        out = result.structured_content
        assert "note" not in out and out["result"] == {"first": "first done", "rest": ["slow done"] * 3}, out
        assert len([c for c in calls() if c.get("label") == "first"]) == 1, calls()
        state = await get_task(session, "slow-task")
        assert tool_result(state).structured_content == out, state

    # A client that leaves with a task running: the run is cancelled (or the server stopped, if
    # it took longer to drain than the SDK waits), and a new server finds the thread unfinished
    # in the journal, a cancelled task that resume_workflow continues.
    flags = ["--backend", f"scripted:{backend}"]
    async with stateless(*flags, extensions=[Tasks()]) as client:
        await client.session.call_tool("run_workflow", {"script": SLOW, "thread_id": "left-task"},
                                       allow_claimed=True)
        with anyio.fail_after(30):
            while not ((await get_task(client.session, "left-task")).status_message or "").startswith("1/4"):
                await anyio.sleep(0.02)
    async with stateless(*flags, extensions=[Tasks()]) as client:
        state = await get_task(client.session, "left-task")
        assert state.status == "cancelled" and "not running on this server" in state.status_message, state
        await expect_error(cancel_task(client.session, "left-task"), -32602, "not running as a task")
        result = await client.call_tool("resume_workflow", {"thread_id": "left-task"})
        assert result.structured_content["result"] == {"first": "first done", "rest": ["slow done"] * 3}, result
        assert len([c for c in calls() if c.get("label") == "first"]) == 2, calls()


async def tasks_expiry():
    """With --task-ttl 0 a finished task expires at once: tasks/get says so, and the thread is
    still in the journal."""
    async with stateless("--task-ttl", "0", extensions=[Tasks()]) as client:
        session = client.session
        handle = await session.call_tool("run_workflow", {"script": "return await agent('hi')",
                                                          "thread_id": "short-lived"}, allow_claimed=True)
        assert handle.ttl_ms == 0, handle
        with anyio.fail_after(30):
            while True:
                try:
                    state = await get_task(session, "short-lived")
                except MCPError as e:
                    assert e.code == -32602 and "has expired" in e.message, e
                    assert "show_thread" in e.message, e
                    break
                assert state.status == "working", state
                await anyio.sleep(0.02)
        shown = await client.call_tool("show_thread", {"thread_id": "short-lived"})
        assert len(shown.structured_content["entries"]) == 1, shown


async def tasks_sampling():
    """--leaves sampling in a task: each batch of the leaves' sampling requests is the task's
    input_required status, answered with tasks/update; the run replays from its journal and
    goes on to the next batch or the end."""
    received = []
    on_sample = host_model(received)
    async with stateless(*SAMPLING_FLAGS, sampling_callback=on_sample, extensions=[Tasks()]) as client:
        session = client.session
        handle = await session.call_tool("run_workflow", {"script": BATCHED, "thread_id": "task-batched"},
                                         allow_claimed=True)
        batches = []
        with anyio.fail_after(60):
            while True:
                state = await get_task(session, handle.task_id)
                if state.status in ("completed", "failed", "cancelled"):
                    break
                if state.status != "input_required":
                    await anyio.sleep(0.02)
                    continue
                assert "tasks/update" in state.status_message, state
                batches.append(sorted(state.input_requests))
                if len(batches) == 1:
                    # Answers that miss a key are refused, and the task still waits.
                    await expect_error(update_task(session, handle.task_id, {}), -32602, "missing: leaf-1-turn-1")
                    again = await get_task(session, handle.task_id)
                    assert again.status == "input_required", again
                responses = {}
                for key, request in state.input_requests.items():
                    assert request["method"] == "sampling/createMessage", request
                    params = types.CreateMessageRequestParams.model_validate(request["params"])
                    reply = await on_sample(None, params)
                    responses[key] = reply.model_dump(by_alias=True, mode="json", exclude_none=True)
                await update_task(session, handle.task_id, responses)
        assert batches == [["leaf-1-turn-1"], ["leaf-1-turn-2"],
                           ["leaf-2-turn-1", "leaf-3-turn-1", "leaf-4-turn-1"]], batches
        out = tool_result(state).structured_content
        assert out["ok"] is True and out["result"] == {
            "verdict": {"ok": True},
            "notes": ["hi from the host: Say hi 0", "hi from the host: Say hi 1", "hi from the host: Say hi 2"],
        }, out
        assert len(received) == 5, received
        await expect_error(update_task(session, handle.task_id, {}), -32602, "asks for no input")


async def tasks_http():
    """Tasks over Streamable HTTP, --leaves sampling: one client starts a task, another
    (its own connection) answers its batches with tasks/update, and the first reads the
    result: a task is not tied to the session that made it."""
    received = []
    on_sample = host_model(received)
    url = os.environ["FLOWBOX_URL"]
    async with Client(url, mode="auto", sampling_callback=on_sample, extensions=[Tasks()]) as starter:
        assert starter.protocol_version == "2026-07-28", starter.protocol_version
        script = "return await parallel([lambda i=i: agent('http task ' + str(i)) for i in range(3)])"
        handle = await starter.session.call_tool("run_workflow", {"script": script, "thread_id": "http-task"},
                                                 allow_claimed=True)
        assert isinstance(handle, TaskHandle) and handle.task_id == "http-task", handle
        async with Client(url, mode="auto", sampling_callback=on_sample, extensions=[Tasks()]) as helper:
            with anyio.fail_after(60):
                while True:
                    state = await get_task(helper.session, "http-task")
                    if state.status == "input_required":
                        break
                    assert state.status == "working", state
                    await anyio.sleep(0.02)
            assert sorted(state.input_requests) == ["leaf-1-turn-1", "leaf-2-turn-1", "leaf-3-turn-1"], state
            responses = {}
            for key, request in state.input_requests.items():
                params = types.CreateMessageRequestParams.model_validate(request["params"])
                reply = await on_sample(None, params)
                responses[key] = reply.model_dump(by_alias=True, mode="json", exclude_none=True)
            await update_task(helper.session, "http-task", responses)
        out = tool_result(await until_terminal(starter.session, "http-task")).structured_content
        assert out["result"] == [f"hi from the host: http task {i}" for i in range(3)], out


SCENARIOS = {
    "basics": basics,
    "cancel_and_resume": cancel_and_resume,
    "hostile_script": hostile_script,
    "hostile_memory_and_output": hostile_memory_and_output,
    "http": http,
    "http_sampling": http_sampling,
    "sampling": sampling,
    "sampling_resume": sampling_resume,
    "stateless_basics": stateless_basics,
    "stateless_sampling": stateless_sampling,
    "stateless_slots": stateless_slots,
    "stateless_http": stateless_http,
    "stateless_cancel": stateless_cancel,
    "tasks_basics": tasks_basics,
    "tasks_cancel": tasks_cancel,
    "tasks_expiry": tasks_expiry,
    "tasks_sampling": tasks_sampling,
    "tasks_http": tasks_http,
}

if __name__ == "__main__":
    anyio.run(SCENARIOS[sys.argv[1]])
    print(f"{sys.argv[1]}: ok")
