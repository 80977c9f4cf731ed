# expect: forbidden — eval of a string
return eval("__import__('os').environ[" + repr(args["secret_env"]) + "]")
