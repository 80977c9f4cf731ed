try:
    agent.missing
except AttributeError as error:
    return str(type(error.obj))
