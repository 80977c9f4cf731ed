# expect: forbidden — reading co_ attributes through a code object
def f():
    return "secret"
code = f.__code__
return list(code.co_consts)
