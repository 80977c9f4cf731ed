# Plan, run the steps in order on earlier results, retry a step with its checker's feedback.
meta = {
    "name": "plan-execute-check",
    "description": "Plan steps, run them in order, and retry a step its checker rejects",
    "phases": [{"title": "plan"}, {"title": "execute", "detail": "run, check, retry"}],
}

STEPS = {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 6}
PLAN = {"type": "object", "properties": {"steps": STEPS}, "required": ["steps"]}
CHECK = {"type": "object", "required": ["ok", "feedback"],
         "properties": {"ok": {"type": "boolean"}, "feedback": {"type": "string"}}}


async def main():
    goal = args.get("goal", "Write a migration guide from config v1 to v2 for our users")
    max_attempts = max(1, args.get("max_attempts", 2))

    phase("plan")
    plan = await agent(f"Break this goal into at most six concrete, ordered steps: {goal}",
                       schema=PLAN, label="plan")
    steps, done = plan["steps"], []
    phase("execute")
    for n, step in enumerate(steps, 1):
        # A step costs about what each earlier one did; skip what the budget cannot pay for.
        if budget.remaining() is not None and budget.remaining() < budget.spent() / n:
            log(f"budget nearly spent: skipping steps {n}-{len(steps)}")
            break
        feedback = None
        for attempt in range(1, max_attempts + 1):
            output = await agent({"goal": goal, "step": step, "earlier_steps": done,
                                  "feedback": feedback}, label=f"step {n} try {attempt}")
            check = await agent(
                {"task": "Does the output fully do the step? If not, say what is missing",
                 "step": step, "output": output},
                schema=CHECK, label=f"check {n} try {attempt}")
            feedback = check["feedback"]
            if check["ok"]:
                break
        done.append({"step": step, "output": output, "attempts": attempt,
                     "status": "ok" if check["ok"] else "failed", "feedback": feedback})
        if not check["ok"]:
            break  # later steps build on this one
    results = done + [{"step": s, "status": "skipped"} for s in steps[len(done):]]
    return {"goal": goal, "ok": all(r["status"] == "ok" for r in results), "steps": results}
