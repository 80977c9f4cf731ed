meta = {
    "name": "sunset-v1-debate",
    "description": "Three personas argue a decision, then a judge decides",
    "phases": [{"title": "argue"}, {"title": "judge"}],
}

PERSONAS = {
    "CFO": "You are the CFO. You care about cost, revenue at risk and contracts.",
    "staff engineer": "You are a staff engineer. You care about maintenance load and risk.",
    "support lead": "You lead customer support. You care about customers and ticket volume.",
}
DECISION = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["sunset this quarter", "postpone"]},
        "conditions": {"type": "array", "items": {"type": "string"}},
        "reasoning": {"type": "string"},
    },
    "required": ["decision", "conditions", "reasoning"],
}


async def main():
    question = "Should we sunset our legacy v1 API this quarter?"
    phase("argue")
    names = list(PERSONAS)
    arguments = await parallel([
        lambda n=n: agent(f"{question} Argue your position in at most five bullets.",
                          instruction=PERSONAS[n], label=n)
        for n in names
    ])
    heard = {n: a for n, a in zip(names, arguments) if a is not None}
    phase("judge")
    decision = await agent({"question": question, "arguments": heard,
                            "task": "Weigh these arguments and decide; state the conditions"},
                           model="deep", schema=DECISION,
                           instruction="You are an impartial judge.", label="judge")
    return {"arguments": heard, **decision}
