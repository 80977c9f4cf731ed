"""One fixed warm-up of the SDK, run while componentize-py pre-initialises the guest, so that
the snapshot every instance starts from already holds what a first run would otherwise build:
CPython's specialised bytecode for the SDK's own functions and its caches of type attributes.
Without it every run, being the first in its fresh instance, interprets the SDK cold and writes
those caches into pages of the memory image, which copies them.

The warm-up is the same at every build and runs before the snapshot, so every instance still
starts from identical memory: a run's fuel is the same whether it is the first or the
thousandth, from the warm pool or not. Its scripts run against `WarmupHost`, which answers
every call at once with a fixed reply; nothing of them survives but the interpreter's caches.
"""

import json

from .errors import CallFailed, ScriptFailure
from .host import BudgetState
from .runner import check, plan_notes, run

# The shapes of script the SDK runs most: the three forms, leaves one at a time, fanned out and
# pipelined, options, tools, a result of each JSON type, phases, logs and caught failures.
SCRIPTS = (
    "return 1",
    "return await agent('hello')",
    """\
async def main():
    phase("draft")
    replies = await parallel([lambda i=i: agent(f"item {i}", label=str(i)) for i in range(8)])
    log(f"{len(replies)} replies")
    return {"replies": replies, "count": len(replies), "ok": True, "none": None, "ratio": 0.5}
""",
    """\
async def draft(item):
    return await agent(f"draft {item}")
async def review(prev, item):
    return await agent({"review": prev, "item": item}, schema={"type": "object"})
async def polish(prev, item, index):
    return await call_tool("polish", text=str(prev), index=index)
results = await pipeline(list(range(4)), draft, review, polish)
return [r for r in results if r is not None]
""",
    """\
import json
n = 0
for i in range(args["n"]):
    try:
        await agent(f"step {i}", model="small", instruction="be brief")
    except AgentError as error:
        log(str(error))
    n += 1
print("done", n)
return json.dumps({"n": n, "spent": budget.spent(), "left": budget.remaining()})
""",
    """\
def main():
    return parallel([lambda: agent("a"), lambda: 1 / 0])
""",
)
ARGS = json.dumps({"n": 3})


class WarmupHost:
    """A host that answers every call at once: agents with the text "ok" (or an empty object
    for a schema), tools with their arguments."""

    def __init__(self):
        self._pending = []
        self._handles = 0

    def started(self, meta_json):
        pass

    def start_agent(self, prompt, options, path) -> int:
        if options is None or options.schema is None:
            return self._start("ok", True)
        return self._start("{}", False)

    def start_tool(self, name, arguments_json, path) -> int:
        return self._start(arguments_json, False)

    def await_next(self) -> list:
        if not self._pending:
            raise CallFailed("invalid-request", "no call is pending")
        completions, self._pending = self._pending, []
        return completions

    def phase(self, title):
        pass

    def log(self, message):
        pass

    def branch_failed(self, failure):
        pass

    def placeholder_path(self, handle, constructs):
        pass

    def budget(self) -> BudgetState:
        return BudgetState(None, 0)

    def sleep(self, nanoseconds):
        pass

    def _start(self, reply: str, text: bool) -> int:
        self._handles += 1
        handle = self._handles
        # A plain tuple, as the bindings give: what the snapshot's bytecode specialises on.
        self._pending.append((handle, reply, None, text))
        return handle


def warm_up(rounds: int = 3) -> list:
    """Runs, checks and plans every warm-up script `rounds` times (CPython specialises an
    instruction only once it has run a few times); returns the last round's results."""
    results = []
    for _ in range(rounds):
        results = []
        for script in SCRIPTS:
            check(script, True)
            plan_notes(WarmupHost(), script)
            results.append(run(WarmupHost(), script, ARGS))
        try:
            run(WarmupHost(), "import os", ARGS)
        except ScriptFailure:
            pass
    return results
