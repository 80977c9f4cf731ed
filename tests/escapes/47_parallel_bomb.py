# expect: harmless — resource exhaustion through the SDK ends as a limit or exception
items = [lambda: 1] * 10_000_000
return len(await parallel(items))
