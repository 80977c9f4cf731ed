import sys
return sys.modules["os"].environ.get(args["secret_env"])
