return open(args["secret_path"]).read()
