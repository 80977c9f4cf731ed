schema = {"type": "object"}
for _ in range(10_000):
    schema = {"type": "object", "properties": {"x": schema}}
try:
    await agent("x", schema=schema)
except (ValueError, RecursionError, MemoryError) as error:
    return type(error).__name__
