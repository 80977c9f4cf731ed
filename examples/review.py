meta = {
    "name": "code-review",
    "description": "Review several files in parallel, then synthesise one verdict",
    "phases": [
        {"title": "review", "detail": "one reviewer per file"},
        {"title": "synthesise"},
    ],
}

VERDICT = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["approve", "revise"]},
        "summary": {"type": "string"},
    },
    "required": ["verdict", "summary"],
}


async def main():
    files = args.get("files", ["parser.rs", "lexer.rs", "eval.rs", "main.rs"])

    phase("review")
    reviews = await parallel([
        lambda f=f: agent(f"Review {f} for bugs and unclear code", label=f"review {f}")
        for f in files
    ])
    done = [r for r in reviews if r is not None]
    log(f"{len(done)} of {len(files)} reviews came back")

    phase("synthesise")
    verdict = await agent(
        {"task": "Decide whether to approve the change", "reviews": done},
        schema=VERDICT,
        label="synthesis",
    )
    return {"files": files, "reviews": reviews, "verdict": verdict}
