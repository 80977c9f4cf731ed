# expect: harmless — allowed modules are views without their submodules
import json
try:
    return str(json.decoder)
except AttributeError as error:
    return "blocked: " + str(error)
