# expect: harmless — a busy loop ends with the fuel limit
while True:
    pass
return 1
