# Independent tasks in parallel; each branch catches its own failure so the result says why.
meta = {
    "name": "independent-tasks",
    "description": "Run unrelated tasks in parallel and report each one's output or error",
    "phases": [{"title": "run", "detail": "one leaf per task"}],
}


async def run_task(i, task):
    # parallel() would turn a failure into a bare None; catching here keeps the reason.
    try:
        return {"task": task, "ok": True, "output": await agent(task, label=f"task {i}")}
    except AgentError as e:  # also BudgetExceeded and AgentCapExceeded
        return {"task": task, "ok": False, "error": str(e)}


async def main():
    tasks = args.get("tasks", [
        "Write a one-paragraph changelog entry for the new retry policy",
        "List three edge cases for parsing ISO-8601 durations",
        "Suggest a name for a CLI flag that disables the journal",
    ])
    phase("run")
    results = await parallel([run_task(i, t) for i, t in enumerate(tasks)])
    failed = [r["task"] for r in results if not r["ok"]]
    log(f"{len(tasks) - len(failed)} of {len(tasks)} tasks succeeded")
    return {"ok": not failed, "results": results, "failed": failed}
