# expect: forbidden — reaching the await protocol directly
return str(agent("x").__await__())
