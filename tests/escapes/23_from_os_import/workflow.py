from os import environ
return environ.get(args["secret_env"])
