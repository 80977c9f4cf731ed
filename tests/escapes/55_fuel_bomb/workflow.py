while True:
    pass
return 1
