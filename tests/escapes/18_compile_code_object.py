# expect: forbidden — building a code object
code = compile("1", "x", "eval")
return 1
