return __builtins__["open"](args["secret_path"]).read()
