import string
try:
    return str(string.Formatter().get_field("0.cr_frame", [agent("x")], {}))
except AttributeError as error:
    return "blocked: " + str(error)
