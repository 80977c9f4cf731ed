"""The journal: durable runs, listings, and resume after the process was killed."""

import asyncio
import json
import signal
import subprocess
import sys
import textwrap

import pytest

import flowbox
from flowbox import errors

SCRIPT = """
results = []
for i in range(4):
    results.append(await agent(f"step {i}", instance_id="worker"))
return results
"""

# A process that runs SCRIPT with a Python leaf that logs each call it answers, and kills
# itself (SIGKILL, nothing flushed or cleaned up) when asked for step `die_at`.
WORKER = textwrap.dedent(
    """
    import json, os, signal, sys
    import flowbox

    journal, thread, log, die_at, mode = sys.argv[1:6]
    script = sys.stdin.read()

    async def leaf(request):
        if request.prompt == f"step {die_at}":
            os.kill(os.getpid(), signal.SIGKILL)
        with open(log, "a") as f:
            f.write(f"{request.prompt} after {len(request.conversation)} turns\\n")
        return "done " + request.prompt

    rt = flowbox.Runtime(leaf, journal=journal)
    if mode == "run":
        outcome = rt.run_sync(script, thread_id=thread)
    else:
        outcome = rt.resume_sync(thread)
    print(json.dumps({"result": outcome.unwrap(), "recorded": outcome.recorded}))
    """
)


def worker(tmp_path, mode, die_at):
    return subprocess.run(
        [
            sys.executable,
            "-c",
            WORKER,
            str(tmp_path / "journal.db"),
            "t-1",
            str(tmp_path / "calls.log"),
            str(die_at),
            mode,
        ],
        input=SCRIPT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_killed_process_resumes_without_calling_finished_leaves_again(tmp_path):
    killed = worker(tmp_path, "run", die_at=2)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (tmp_path / "calls.log").read_text().split("\n")[:-1] == [
        "step 0 after 0 turns",
        "step 1 after 2 turns",
    ]

    resumed = worker(tmp_path, "resume", die_at=99)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["result"] == [f"done step {i}" for i in range(4)]
    # Steps 0 and 1 came from the journal; only 2 and 3 called Python again, and the
    # instance's conversation was rebuilt from the journal's replies.
    assert (tmp_path / "calls.log").read_text().split("\n")[:-1] == [
        "step 0 after 0 turns",
        "step 1 after 2 turns",
        "step 2 after 4 turns",
        "step 3 after 6 turns",
    ]

    # A finished thread answers from its record.
    again = worker(tmp_path, "resume", die_at=0)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["recorded"] is True


def test_threads_and_show_read_the_journal(tmp_path):
    async def leaf(request):
        return "x"

    rt = flowbox.Runtime(leaf, journal=tmp_path / "j.db")
    outcome = rt.run_sync(
        "meta = {'name': 'listed', 'description': 'd'}\nreturn await agent('a')", thread_id="t-list"
    )
    assert outcome.ok

    async def read():
        return await rt.threads(), await rt.show("t-list")

    threads, shown = asyncio.run(read())
    assert [t["thread_id"] for t in threads] == ["t-list"]
    assert shown["name"] == "listed" and shown["outcome"]["result"] == "x"
    assert isinstance(rt.resume_sync("no-such-thread").error, errors.UnknownThread)

    async def unknown():
        await rt.show("no-such-thread")

    with pytest.raises(errors.UnknownThread):
        asyncio.run(unknown())


def test_a_runtime_without_a_journal_has_no_threads():
    rt = flowbox.Runtime("fake")
    assert asyncio.run(rt.threads()) == []
    with pytest.raises(errors.JournalError, match="journal=PATH"):
        rt.resume_sync("t")


def test_a_journal_that_cannot_open_is_a_setup_error(tmp_path):
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(errors.SetupError, match="cannot open the journal"):
        flowbox.Runtime("fake", journal=tmp_path / "dir.db")
