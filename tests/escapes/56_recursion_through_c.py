# expect: harmless — recursion through C code ends in RecursionError or a stack error
# error: uncaught: maximum recursion depth exceeded
def f(n):
    return sum(map(f, [n + 1]))
return f(0)
