try:
    await agent("x" * 5_000_000)
except (ValueError, MemoryError) as error:
    return type(error).__name__
