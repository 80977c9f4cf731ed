import typing
try:
    return str(typing.get_type_hints(agent))
except AttributeError as error:
    return "blocked: " + str(error)
