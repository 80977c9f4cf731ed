os = __import__("os")
return os.getenv(args["secret_env"])
