call = agent("x")
try:
    next(call)
    return "stepped"
except TypeError as error:
    return "refused: " + str(error)
