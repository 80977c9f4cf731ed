def f(n):
    return sum(map(f, [n + 1]))
return f(0)
