# expect: harmless — a memory bomb ends in MemoryError, not a host crash
# error: out_of_memory: ran out of memory
blocks = []
while True:
    blocks.append("x" * 10_000_000)
return 1
