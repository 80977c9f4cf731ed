"""The built-in provider backends from Python, against loopback servers that speak OpenAI's
Chat Completions and Anthropic's Messages: a leaf agent's turns, its token counts, and a Python
tool in its loop."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import flowbox


class ChatCompletions(BaseHTTPRequestHandler):
    """A leaf's first turn calls the `lookup` tool; the next answers with the tool's result."""

    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        tool_results = [m for m in body["messages"] if m["role"] == "tool"]
        if tool_results:
            message = {"role": "assistant", "content": f"found: {tool_results[-1]['content']}"}
            finish = "stop"
        else:
            call = {"keys": ["x", "y"]}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call-1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps(call)},
                    }
                ],
            }
            finish = "tool_calls"
        reply = {
            "id": "r",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
        }
        self.reply(reply)

    def reply(self, reply):
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class Messages(ChatCompletions):
    """The same turns in Anthropic's Messages API."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        results = [
            block
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]
        if results:
            content = results[-1]["content"]
            text = content if isinstance(content, str) else content[0]["text"]
            blocks, stop = [{"type": "text", "text": f"found: {text}"}], "end_turn"
        else:
            call = {"type": "tool_use", "id": "call-1", "name": "lookup", "input": {"keys": ["x"]}}
            blocks, stop = [call], "tool_use"
        reply = {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": blocks,
            "stop_reason": stop,
            "usage": {"input_tokens": 7, "output_tokens": 3},
        }
        self.reply(reply)


def serve(handler):
    handler.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture
def server():
    httpd = serve(ChatCompletions)
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_an_anthropic_leaf_agent_calls_a_python_tool_in_its_loop(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")

    @flowbox.tool(script=False)
    def lookup(keys: list[str]) -> dict:
        """Looks keys up."""
        return {key: key.upper() for key in keys}

    httpd = serve(Messages)
    try:
        base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
        provider = flowbox.Provider.anthropic("claude-test", base_url=base_url)
        outcome = flowbox.Runtime(provider, tools=[lookup]).run_sync("return await agent('find x')")
    finally:
        httpd.shutdown()
    assert outcome.unwrap() == 'found: {"x":"X"}'
    assert (outcome.summary.input_tokens, outcome.summary.output_tokens) == (14, 6)
    path, first = Messages.requests[0]
    assert path == "/v1/messages" and first["model"] == "claude-test"
    assert [tool["name"] for tool in first["tools"]] == ["lookup"]


def test_an_openai_leaf_agent_calls_a_python_tool_in_its_loop(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    looked_up = []

    @flowbox.tool(script=False)
    async def lookup(keys: list[str]) -> dict:
        """Looks keys up."""
        looked_up.append(keys)
        return {key: key.upper() for key in keys}

    prices = Path(__file__).resolve().parents[2] / "examples/prices.json"
    rt = flowbox.Runtime(
        flowbox.Provider.openai("gpt-4o", base_url=server), tools=[lookup], prices=prices
    )
    outcome = rt.run_sync("return await agent('find x and y')")
    assert outcome.unwrap() == 'found: {"x":"X","y":"Y"}'
    assert looked_up == [["x", "y"]]
    # Two model turns, each counted as the provider reported it.
    assert (outcome.summary.input_tokens, outcome.summary.output_tokens) == (22, 10)
    assert outcome.summary.estimated_tokens == 0
    # Priced as gpt-4o from the price table: $2.50 and $10 per million tokens.
    assert outcome.summary.cost_usd == pytest.approx(22 * 2.5e-6 + 10 * 10e-6)
    paths = {path for path, _ in ChatCompletions.requests}
    assert paths == {"/v1/chat/completions"}
    first = ChatCompletions.requests[0][1]
    assert first["model"] == "gpt-4o"
    assert [tool["function"]["name"] for tool in first["tools"]] == ["lookup"]
    # A tool offered to leaves only is not callable from scripts.
    script = (
        "try:\n    await call_tool('lookup', keys=[])\nexcept ToolError as e:\n    return str(e)"
    )
    assert "no tool named" in rt.run_sync(script).unwrap()


def test_a_provider_that_cannot_be_reached_fails_the_leaf(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    rt = flowbox.Runtime(
        flowbox.Provider.openai("m", base_url="http://127.0.0.1:9/v1"),
        limits=flowbox.Limits(timeout=60),
    )
    script = "try:\n    await agent('x')\nexcept AgentError as e:\n    return [e.kind, e.retryable]"
    kind, retryable = rt.run_sync(script).unwrap()
    assert kind == "transport" and retryable is True
