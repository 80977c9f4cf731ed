# expect: forbidden — sys.modules is a way to everything
import sys
return sys.modules["os"].environ.get(args["secret_env"])
