"""workflow-middleware 0.1.0's own README examples, from its package (python/test.sh fetches
it into target/workflow-middleware), run on flowbox.langchain with the import changed."""

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = (
    Path(__file__).resolve().parents[2]
    / "target/workflow-middleware/workflow_middleware-0.1.0/examples"
)

# An offline chat model for real_usage.py, which names a provider's model: as the root it calls
# run_workflow with a two-leaf script, then reports what came back; as a leaf (its system
# prompt has flowbox's leaf addendum) it answers its prompt.
FAKE_MODEL = '''
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

SCRIPT = """meta = {"name": "audit", "description": "Audit a file from two angles"}
async def main():
    phase("audit")
    found = await parallel([lambda a=a: agent(f"Audit auth.py for {a}", label=a)
                            for a in ("injection", "secrets")])
    return {"findings": found}
"""

class OfflineModel(BaseChatModel):
    @property
    def _llm_type(self):
        return "offline"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        system = " ".join(m.text for m in messages if m.type == "system")
        if "As a leaf of a workflow" in system:
            reply = AIMessage(content=f"no issue found: {messages[-1].text}")
        elif isinstance(messages[-1], ToolMessage):
            reply = AIMessage(content=f"audit report: {messages[-1].text}")
        else:
            call = {"name": "run_workflow", "args": {"script": SCRIPT}, "id": "call-1"}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])

MODEL = OfflineModel()
'''


def example(name: str) -> str:
    path = EXAMPLES / name
    assert path.exists(), f"{path} is missing: python/test.sh fetches it"
    return path.read_text()


def run(source: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "example.py"
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )


def test_basic_usage_runs_with_only_the_import_changed(tmp_path):
    source = example("basic_usage.py")
    swapped = source.replace("from workflow_middleware import", "from flowbox.langchain import")
    assert swapped.count("flowbox.langchain") == 1 and "workflow_middleware" not in swapped
    done = run(swapped, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "'[leaf] Review auth.py for correctness'" in done.stdout
    assert "'agents_spawned': 3" in done.stdout and "'phases': ['Review']" in done.stdout


def test_real_usage_runs_offline_with_the_import_and_its_model_changed(tmp_path):
    source = example("real_usage.py")
    swapped = source.replace("from workflow_middleware import", "from flowbox.langchain import")
    # Its model is a provider's id (it needs a key and langchain-anthropic): an offline model
    # stands in, and run() is called (the example calls it only when a key is set).
    swapped = swapped.replace('"claude-sonnet-4-5"', '__import__("offline_model").MODEL', 1)
    assert "offline_model" in swapped
    (tmp_path / "offline_model.py").write_text(FAKE_MODEL)
    swapped += "\nrun()\n"
    done = run(swapped, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("audit report: ")
    assert "no issue found: Audit auth.py for injection" in done.stdout
    assert "no issue found: Audit auth.py for secrets" in done.stdout
