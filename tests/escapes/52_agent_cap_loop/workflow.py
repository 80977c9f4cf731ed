n = 0
while True:
    try:
        await agent(str(n))
    except AgentCapExceeded:
        return n
    n += 1
