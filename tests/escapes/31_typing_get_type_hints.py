# expect: harmless — typing.get_type_hints evaluates strings; the view leaves it out
# result: "blocked: module 'typing' has no attribute 'get_type_hints'"
import typing
try:
    return str(typing.get_type_hints(agent))
except AttributeError as error:
    return "blocked: " + str(error)
