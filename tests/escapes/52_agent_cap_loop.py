# expect: harmless — a runaway loop of leaves stops at the lifetime cap
# result: 50
n = 0
while True:
    try:
        await agent(str(n))
    except AgentCapExceeded:
        return n
    n += 1
