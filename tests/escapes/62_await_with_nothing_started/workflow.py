async def nothing(n):
    return n

empty = await parallel([])
piped = await pipeline([], lambda item: agent(item))
local = await parallel([lambda: nothing(1), lambda: nothing(2)])
try:
    await agent
    bare = "awaited the primitive itself"
except TypeError:
    bare = "TypeError"
call = agent("once")
first = await call
try:
    await call
    again = "awaited twice"
except RuntimeError:
    again = "RuntimeError"
return [empty, piped, local, bare, first, again]
