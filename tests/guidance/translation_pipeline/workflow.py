meta = {
    "name": "translate-blurbs",
    "description": "Translate product blurbs into German: translate, review, polish",
    "phases": [{"title": "translate", "detail": "translate -> review -> polish, per blurb"}],
}

REVIEW = {
    "type": "object",
    "properties": {"faithful": {"type": "boolean"},
                   "problems": {"type": "array", "items": {"type": "string"}}},
    "required": ["faithful", "problems"],
}


def translate(blurb):
    return agent(f"Translate into German:\n{blurb}", model="fast",
                 instruction="You are a professional English-to-German translator.")


async def review(german, blurb):
    verdict = await agent({"task": "Check the German translation against the English "
                                   "original for meaning that was lost or changed",
                           "original": blurb, "translation": german},
                          schema=REVIEW, model="fast")
    return {"german": german, "problems": verdict["problems"]}


def polish(reviewed, blurb):
    return agent({"task": "Polish this German product blurb; fix the listed problems and "
                          "return only the final text",
                  "original": blurb, "draft": reviewed["german"],
                  "problems": reviewed["problems"]},
                 instruction="You write fluent German marketing copy.")


async def main():
    blurbs = args["blurbs"]
    phase("translate")
    results = await pipeline(blurbs, translate, review, polish)
    return {"translations": [{"english": b, "german": g} for b, g in zip(blurbs, results)],
            "failed": [i for i, g in enumerate(results) if g is None]}
