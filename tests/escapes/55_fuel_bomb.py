# expect: harmless — a busy loop ends with the fuel limit
# error: out_of_fuel: units of fuel
while True:
    pass
return 1
