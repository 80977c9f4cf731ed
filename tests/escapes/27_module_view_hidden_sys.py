# expect: harmless — statistics imports sys internally; its view does not expose it
# result: "blocked: module 'statistics' has no attribute 'sys'"
import statistics
try:
    return statistics.sys.modules["os"].environ.get(args["secret_env"])
except AttributeError as error:
    return "blocked: " + str(error)
