async def inner():
    return await agent("x")
c = inner()
return str(c.cr_await)
