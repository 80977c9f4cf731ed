"""A direct body: awaits at top level and ends in return."""
draft = await agent("Write a haiku about rust")
review = await agent({"draft": draft, "task": "review"})
return {"draft": draft, "review": review}
