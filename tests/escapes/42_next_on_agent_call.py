# expect: harmless — stepping an agent call by hand is not a way around the scheduler
# result: "refused: 'AgentCall' object is not an iterator"
call = agent("x")
try:
    next(call)
    return "stepped"
except TypeError as error:
    return "refused: " + str(error)
