meta = {"name": "scores", "description": "A main() whose result holds a set."}


def tally():
    return {"a": [1, 2]}


async def main():
    scores = tally()
    if scores:
        return {
            "scores": scores,
            "seen": {1, 2},
        }
    return scores
