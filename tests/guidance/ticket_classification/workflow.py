meta = {
    "name": "classify-tickets",
    "description": "Classify support tickets by category and urgency",
    "phases": [{"title": "classify"}],
}

LABEL = {
    "type": "object",
    "properties": {
        "category": {"enum": ["bug", "billing", "feature request", "question"]},
        "urgency": {"enum": ["low", "medium", "high"]},
        "reason": {"type": "string"},
    },
    "required": ["category", "urgency", "reason"],
}


async def main():
    tickets = args["tickets"]
    phase("classify")
    labels = await parallel([
        lambda t=t, i=i: agent({"task": "Classify this support ticket", "ticket": t},
                               schema=LABEL, model="fast", label=f"ticket {i}")
        for i, t in enumerate(tickets)
    ])
    counts = {}
    results = []
    for ticket, label in zip(tickets, labels):
        if label is None:
            continue
        counts[label["category"]] = counts.get(label["category"], 0) + 1
        results.append({"ticket": ticket, **label})
    return {"counts": counts, "tickets": results,
            "unclassified": [t for t, l in zip(tickets, labels) if l is None]}
