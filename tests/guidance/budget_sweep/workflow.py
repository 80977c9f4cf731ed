meta = {
    "name": "headline-scores",
    "description": "Score headline variants for clarity while the budget lasts",
    "phases": [{"title": "score"}],
}

SCORE = {"type": "object", "required": ["score"],
         "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10}}}


async def main():
    headlines = args["headlines"]
    phase("score")
    scored = []
    for i, headline in enumerate(headlines):
        # Stop before a leaf that the budget could not pay for: one costs about what each
        # earlier one did on average.
        if scored and budget.remaining() < budget.spent() / len(scored):
            log(f"stopping after {len(scored)} headlines: the budget is nearly spent")
            break
        try:
            result = await agent(f"Rate the clarity of this headline from 1 to 10: {headline}",
                                 schema=SCORE, model="fast", label=f"headline {i}")
        except BudgetExceeded:
            break
        scored.append({"headline": headline, "score": result["score"]})
    best = sorted(scored, key=lambda s: s["score"], reverse=True)[:3]
    return {"scored": len(scored), "of": len(headlines), "best": best,
            "tokens": budget.spent()}
