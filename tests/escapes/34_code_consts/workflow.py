def f():
    return "secret"
code = f.__code__
return list(code.co_consts)
