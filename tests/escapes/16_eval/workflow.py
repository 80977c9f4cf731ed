return eval("__import__('os').environ[" + repr(args["secret_env"]) + "]")
