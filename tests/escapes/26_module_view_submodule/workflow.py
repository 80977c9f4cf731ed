import json
try:
    return str(json.decoder)
except AttributeError as error:
    return "blocked: " + str(error)
