import importlib
return importlib.import_module("os").getenv(args["secret_env"])
