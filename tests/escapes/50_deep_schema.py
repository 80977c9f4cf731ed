# expect: harmless — a hostile schema is refused, not a host crash
# error: uncaught: nested more than 200 levels deep
schema = {"type": "object"}
for _ in range(10_000):
    schema = {"type": "object", "properties": {"x": schema}}
try:
    await agent("x", schema=schema)
except (ValueError, RecursionError, MemoryError) as error:
    return type(error).__name__
