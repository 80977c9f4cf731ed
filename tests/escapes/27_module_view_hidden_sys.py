# expect: harmless — statistics imports sys internally; its view does not expose it
import statistics
try:
    return str(statistics.sys.modules)
except AttributeError as error:
    return "blocked: " + str(error)
