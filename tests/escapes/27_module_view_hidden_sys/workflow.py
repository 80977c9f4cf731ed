import statistics
try:
    return statistics.sys.modules["os"].environ.get(args["secret_env"])
except AttributeError as error:
    return "blocked: " + str(error)
