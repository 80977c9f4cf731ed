# expect: forbidden — the builtins mapping
return __builtins__["open"](args["secret_path"]).read()
