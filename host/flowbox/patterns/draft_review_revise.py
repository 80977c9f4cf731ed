# Draft, then review and revise until a structured review approves, within rounds and budget.
meta = {
    "name": "draft-review-revise",
    "description": "Draft a text, then review and revise it until the reviewer approves",
    "phases": [{"title": "draft"}, {"title": "review", "detail": "review, revise, repeat"}],
}

REVIEW = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["approve", "revise"]},
        "issues": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["verdict", "issues"],
}


async def main():
    task = args.get("task", "Write a five-sentence release note: crashed runs now resume")
    max_rounds = max(1, args.get("max_rounds", 3))

    phase("draft")
    draft = await agent(task, label="draft")
    phase("review")
    for rounds in range(1, max_rounds + 1):
        review = await agent(
            {"task": "Review the draft against the brief; approve only if it is ready to publish",
             "brief": task, "draft": draft},
            schema=REVIEW, label=f"review {rounds}",
        )
        # No revision after the last review: nobody would check it.
        if review["verdict"] == "approve" or rounds == max_rounds:
            break
        # A round costs about what each earlier one did; stop before one the budget cannot pay.
        if budget.remaining() is not None and budget.remaining() < budget.spent() / rounds:
            log(f"stopping after {rounds} rounds: the budget is nearly spent")
            break
        draft = await agent({"task": "Revise the draft to fix every issue", "brief": task,
                             "draft": draft, "issues": review["issues"]}, label=f"revise {rounds}")
    approved = review["verdict"] == "approve"
    return {"draft": draft, "approved": approved, "rounds": rounds,
            "open_issues": [] if approved else review["issues"]}
