# expect: harmless — AttributeError.obj hands back only what the script already had
# result: "<class 'function'>"
try:
    agent.missing
except AttributeError as error:
    return str(type(error.obj))
