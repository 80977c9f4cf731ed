# expect: forbidden — what a coroutine is waiting on
async def inner():
    return await agent("x")
c = inner()
return str(c.cr_await)
