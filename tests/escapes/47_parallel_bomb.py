# expect: harmless — resource exhaustion through the SDK ends as a limit or exception
# error: out_of_fuel: units of fuel
items = [lambda: 1] * 10_000_000
return len(await parallel(items))
