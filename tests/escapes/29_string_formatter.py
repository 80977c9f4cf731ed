# expect: harmless — string.Formatter walks attributes; the view leaves it out
# result: "blocked: module 'string' has no attribute 'Formatter'"
import string
try:
    return str(string.Formatter().get_field("0.cr_frame", [agent("x")], {}))
except AttributeError as error:
    return "blocked: " + str(error)
