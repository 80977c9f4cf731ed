meta = {
    "name": "review-sentiment",
    "description": "Tag the sentiment of app-store reviews with the cheap profile",
    "phases": [{"title": "tag"}],
}

SENTIMENT = {"type": "object", "required": ["sentiment"],
             "properties": {"sentiment": {"enum": ["positive", "neutral", "negative"]}}}


async def main():
    reviews = args["reviews"]
    phase("tag")
    tags = await parallel([
        lambda r=r: agent({"task": "Tag the sentiment of this app-store review", "review": r},
                          schema=SENTIMENT, model="fast")
        for r in reviews
    ])
    counts = {"positive": 0, "neutral": 0, "negative": 0}
    negative = []
    for review, tag in zip(reviews, tags):
        if tag is None:
            continue
        counts[tag["sentiment"]] += 1
        if tag["sentiment"] == "negative":
            negative.append(review)
    return {"counts": counts, "tagged": sum(counts.values()), "of": len(reviews),
            "negative_examples": negative[:5]}
