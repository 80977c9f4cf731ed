attempts = 0
while True:
    attempts += 1
    try:
        result = await agent("flaky task", label=f"attempt {attempts}")
        break
    except AgentError:
        if attempts >= 5:
            raise
return {"attempts": attempts, "result": result}
