async def run():
    answer = await agent("What is 2+2?")
    return answer
