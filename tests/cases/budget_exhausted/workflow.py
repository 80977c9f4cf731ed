done = 0
try:
    for i in range(100):
        await agent(f"task {i}")
        done += 1
except BudgetExceeded as e:
    return {"done": done, "error": str(e)}
