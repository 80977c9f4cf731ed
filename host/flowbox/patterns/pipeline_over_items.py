# Pipeline: each item flows through the stages on its own (no barrier); a failure costs one item.
meta = {
    "name": "pipeline-over-items",
    "description": "Extract, summarise and classify each ticket; report the tickets that failed",
    "phases": [{"title": "process", "detail": "extract -> summarise -> classify, per ticket"}],
}

CLASSIFICATION = {
    "type": "object",
    "properties": {"category": {"enum": ["bug", "feature", "question"]},
                   "urgent": {"type": "boolean"}},
    "required": ["category", "urgent"],
}


def extract(ticket, _, i):
    return agent(f"List the concrete facts (what, where, since when) in this ticket:\n{ticket}",
                 label=f"extract {i}")


def summarise(facts, _, i):
    return agent(f"Summarise these facts in one sentence:\n{facts}", label=f"summarise {i}")


async def classify(summary, ticket, i):
    verdict = await agent({"task": "Classify this ticket", "summary": summary},
                          schema=CLASSIFICATION, label=f"classify {i}")
    return {"ticket": ticket, "summary": summary, **verdict}


async def main():
    tickets = args.get("tickets", [
        "Export to CSV crashes when a row has an emoji, since Tuesday's release",
        "Could the dashboard show costs per team?",
        "How do I rotate my API key?",
    ])
    phase("process")
    results = await pipeline(tickets, extract, summarise, classify)
    failed = [{"index": i, "ticket": t} for i, t in enumerate(tickets) if results[i] is None]
    log(f"{len(tickets) - len(failed)} of {len(tickets)} tickets processed")
    return {"results": [r for r in results if r is not None], "failed": failed}
