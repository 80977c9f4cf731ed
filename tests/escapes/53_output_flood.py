# expect: harmless — printing without end hits the output limit
# error: output_too_large: more than 65536 bytes
while True:
    print("flood " * 100)
return 1
