exec("import os\nprint(os.environ[" + repr(args["secret_env"]) + "])")
return 1
