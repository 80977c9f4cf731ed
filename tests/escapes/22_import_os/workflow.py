import os
return os.environ.get(args["secret_env"])
