# expect: harmless — printing without end hits the output limit
while True:
    print("flood " * 100)
return 1
