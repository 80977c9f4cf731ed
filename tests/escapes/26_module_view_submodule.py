# expect: harmless — allowed modules are views without their submodules
# result: "blocked: module 'json' has no attribute 'decoder'"
import json
try:
    return str(json.decoder)
except AttributeError as error:
    return "blocked: " + str(error)
