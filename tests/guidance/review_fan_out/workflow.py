meta = {
    "name": "pr-review",
    "description": "Review each changed file for bugs in parallel, then give one verdict",
    "phases": [{"title": "review"}, {"title": "verdict"}],
}

FINDINGS = {
    "type": "object",
    "properties": {
        "findings": {"type": "array", "items": {"type": "string"}},
        "blocking": {"type": "boolean"},
    },
    "required": ["findings", "blocking"],
}
VERDICT = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["approve", "request changes"]},
        "blocking_findings": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["verdict", "blocking_findings"],
}


async def main():
    files = args["files"]
    phase("review")
    reviews = await parallel([
        lambda path=path, diff=diff: agent(
            {"task": "Review this diff for bugs", "file": path, "diff": diff},
            agent_type="reviewer", schema=FINDINGS, label=f"review {path}",
        )
        for path, diff in files.items()
    ])
    reviewed = {path: r for path, r in zip(files, reviews) if r is not None}
    missed = [path for path, r in zip(files, reviews) if r is None]

    phase("verdict")
    verdict = await agent(
        {"task": "Decide whether to approve this pull request; list only the findings that "
                 "block it", "reviews": reviewed, "not_reviewed": missed},
        model="deep", schema=VERDICT, label="verdict",
    )
    return {"verdict": verdict["verdict"], "blocking": verdict["blocking_findings"],
            "reviews": reviewed, "not_reviewed": missed}
