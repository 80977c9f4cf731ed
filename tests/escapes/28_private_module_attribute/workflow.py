import random
return random._os.environ.get(args["secret_env"])
