while True:
    print("flood " * 100)
return 1
