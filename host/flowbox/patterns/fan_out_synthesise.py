# Fan out independent leaves over one question, keep the answers that came back, merge them.
meta = {
    "name": "fan-out-synthesise",
    "description": "Ask several perspectives in parallel, then synthesise the ones that answered",
    "phases": [{"title": "fan out", "detail": "one leaf per perspective"}, {"title": "synthesise"}],
}


async def main():
    question = args.get("question", "Should the billing job move from cron to a queue?")
    perspectives = args.get("perspectives", ["reliability", "cost", "operations", "security"])

    phase("fan out")
    answers = await parallel([
        lambda p=p: agent(
            f"Answer only from the {p} perspective, in at most five bullets: {question}",
            label=f"perspective {p}",
        )
        for p in perspectives
    ])
    views = {p: a for p, a in zip(perspectives, answers) if a is not None}
    failed = [p for p, a in zip(perspectives, answers) if a is None]
    if not views:
        return {"question": question, "answer": None, "used": [], "failed": failed}

    phase("synthesise")
    answer = await agent(
        {"task": "Weigh these perspectives; give one recommendation and its main trade-off",
         "question": question, "perspectives": views},
        label="synthesis",
    )
    return {"question": question, "answer": answer, "used": list(views), "failed": failed}
