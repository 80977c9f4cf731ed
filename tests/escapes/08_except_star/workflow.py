try:
    raise ValueError("x")
except* ValueError as group:
    pass
return 1
