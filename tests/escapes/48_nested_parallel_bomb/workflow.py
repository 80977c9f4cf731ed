async def nest(depth):
    if depth == 0:
        return 0
    return (await parallel([lambda: nest(depth - 1)]))[0]
return await nest(5000)
