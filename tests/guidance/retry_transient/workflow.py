meta = {
    "name": "translate-with-retries",
    "description": "Translate release notes, retrying only the failures that may pass",
    "phases": [{"title": "translate"}],
}


async def translate(i, note):
    for attempt in range(1, 4):
        try:
            return {"note": note, "german": await agent(f"Translate into German: {note}",
                                                         label=f"note {i} try {attempt}")}
        except BudgetExceeded as e:
            # Never retryable: the budget is spent.
            return {"note": note, "error": e.kind}
        except AgentError as e:
            if not e.retryable or attempt == 3:
                return {"note": note, "error": e.kind}
            log(f"note {i}: {e.kind}, trying again")


async def main():
    phase("translate")
    results = await parallel([translate(i, n) for i, n in enumerate(args["notes"])])
    return {"translated": [r for r in results if "german" in r],
            "failed": [r for r in results if "error" in r]}
