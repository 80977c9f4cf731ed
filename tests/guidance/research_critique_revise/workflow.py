meta = {
    "name": "research-brief",
    "description": "Research a question into a brief, then critique and revise it",
    "phases": [{"title": "research"}, {"title": "critique"}],
}

CRITIQUE = {
    "type": "object",
    "properties": {
        "issues": {"type": "array", "items": {
            "type": "object",
            "properties": {"issue": {"type": "string"},
                           "severity": {"enum": ["major", "minor"]}},
            "required": ["issue", "severity"],
        }},
    },
    "required": ["issues"],
}


async def main():
    question = args.get("question", "Should we move our job queue from Redis to Postgres?")
    phase("research")
    # One conversation for the writer, so each revision builds on its own earlier draft.
    brief = await agent(f"Research this and write a one-page brief: {question}",
                        agent_type="researcher", instance_id="writer", label="draft")
    phase("critique")
    rounds, major = 0, []
    for rounds in range(1, 4):
        critique = await agent({"question": question, "brief": brief},
                               agent_type="critic", schema=CRITIQUE, label=f"critique {rounds}")
        major = [i["issue"] for i in critique["issues"] if i["severity"] == "major"]
        if not major:
            break
        brief = await agent({"task": "Revise your brief to fix these major issues",
                             "issues": major},
                            agent_type="researcher", instance_id="writer",
                            label=f"revise {rounds}")
    return {"brief": brief, "rounds": rounds, "open_major_issues": major}
