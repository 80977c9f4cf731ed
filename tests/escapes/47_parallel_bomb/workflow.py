items = [lambda: 1] * 10_000_000
return len(await parallel(items))
