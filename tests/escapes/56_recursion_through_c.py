# expect: harmless — recursion through C code ends in RecursionError or a stack error
def f(n):
    return sum(map(f, [n + 1]))
return f(0)
