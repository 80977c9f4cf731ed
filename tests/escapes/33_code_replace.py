# expect: forbidden — a function's code object, to rewrite bytecode
f = lambda: 0
return str(f.__code__.replace(co_code=b""))
