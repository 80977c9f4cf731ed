blocks = []
while True:
    blocks.append("x" * 10_000_000)
return 1
