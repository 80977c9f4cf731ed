meta = {"name": "triage", "description": "Classify tickets", "phases": [{"title": "classify"}]}

LABEL = {"type": "object", "properties": {"label": {"enum": ["bug", "feature", "question"]}}, "required": ["label"]}


async def main():
    phase("classify")
    labels = await parallel([lambda t=t: agent(t, schema=LABEL) for t in args["tickets"]])
    return {"count": len(labels), "all_labelled": all(l["label"] in ("bug", "feature", "question") for l in labels)}
