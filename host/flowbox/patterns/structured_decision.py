# A structured decision (enum choice, confidence, reasons) that the script branches on.
meta = {
    "name": "structured-decision",
    "description": "Triage a bug report into fix, escalate or close, then act on the decision",
    "phases": [{"title": "decide"}, {"title": "act"}],
}

DECISION = {
    "type": "object",
    "properties": {
        "action": {"enum": ["fix", "escalate", "close"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "reasons": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    },
    "required": ["action", "confidence", "reasons"],
}


async def main():
    report = args.get("report", "Saving a draft twice in a row loses the first save's attachments")
    min_confidence = args.get("min_confidence", 0.7)

    phase("decide")
    decision = await agent(
        {"task": "Decide how to handle this bug report", "report": report,
         "actions": {"fix": "small, clear, safe to patch now", "escalate": "needs a human owner",
                     "close": "not a bug, a duplicate or not reproducible"}},
        schema=DECISION, label="triage",
    )
    action = decision["action"]
    # An unsure decision goes to a human rather than being acted on.
    if decision["confidence"] < min_confidence:
        action = "escalate"

    phase("act")
    if action == "fix":
        outcome = await agent(f"Propose a minimal patch plan for: {report}", label="fix plan")
    elif action == "escalate":
        outcome = await agent({"task": "Write a three-line escalation note for the on-call",
                               "report": report, "reasons": decision["reasons"]},
                              label="escalation")
    else:
        outcome = f"Closed: {decision['reasons'][0]}"
    return {"decision": decision, "action": action, "outcome": outcome}
