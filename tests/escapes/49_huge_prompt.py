# expect: harmless — a prompt over the message limit is a clean error
# result: "ValueError"
try:
    await agent("x" * 5_000_000)
except (ValueError, MemoryError) as error:
    return type(error).__name__
