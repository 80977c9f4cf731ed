meta = {
    "name": "credential-rotation-runbook",
    "description": "Plan a runbook, write each step, check it and rewrite what fails",
    "phases": [{"title": "plan"}, {"title": "write", "detail": "write, check, rewrite"}],
}

PLAN = {"type": "object", "required": ["steps"],
        "properties": {"steps": {"type": "array", "items": {"type": "string"},
                                 "minItems": 1, "maxItems": 8}}}
CHECK = {"type": "object", "required": ["correct", "feedback"],
         "properties": {"correct": {"type": "boolean"}, "feedback": {"type": "string"}}}


async def main():
    goal = "A runbook for rotating our production database credentials"
    phase("plan")
    plan = await agent(f"Plan the ordered steps of: {goal}", schema=PLAN, label="plan")
    phase("write")
    steps = []
    for n, step in enumerate(plan["steps"], 1):
        feedback, text, check = None, None, {"correct": False, "feedback": ""}
        for attempt in range(1, 4):  # the first try and at most two rewrites
            text = await agent({"goal": goal, "step": step, "earlier_steps": steps,
                                "feedback": feedback}, label=f"step {n} try {attempt}")
            check = await agent({"task": "Is this runbook step correct and safe? If not, "
                                         "say what to fix", "step": step, "text": text},
                                schema=CHECK, label=f"check {n} try {attempt}")
            if check["correct"]:
                break
            feedback = check["feedback"]
        steps.append({"step": step, "text": text, "attempts": attempt,
                      "checked": check["correct"]})
    return {"goal": goal, "steps": steps, "all_checked": all(s["checked"] for s in steps)}
