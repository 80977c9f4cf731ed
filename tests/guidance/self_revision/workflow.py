meta = {
    "name": "announcement-self-revision",
    "description": "A writer drafts and revises its own announcement with a checker's feedback",
    "phases": [{"title": "draft"}, {"title": "revise"}],
}

CHECK = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"},
                   "unsupported_claims": {"type": "array", "items": {"type": "string"}}},
    "required": ["ok", "unsupported_claims"],
}
WRITER = "Write plainly for customers; no superlatives."


async def main():
    brief = args.get("brief", "Offline mode: edits sync when the connection returns.")
    phase("draft")
    # One conversation: the writer sees its earlier drafts. Options do not carry over, so each
    # call repeats the instruction.
    draft = await agent(f"Draft a five-sentence announcement: {brief}",
                        instance_id="writer", instruction=WRITER, label="draft")
    phase("revise")
    rounds = 0
    for rounds in range(1, 3):
        check = await agent({"task": "List claims the brief does not support", "brief": brief,
                             "draft": draft}, schema=CHECK, label=f"check {rounds}")
        if check["ok"]:
            break
        draft = await agent({"task": "Revise your draft: remove these claims",
                             "claims": check["unsupported_claims"]},
                            instance_id="writer", instruction=WRITER, label=f"revise {rounds}")
    return {"announcement": draft, "rounds": rounds}
