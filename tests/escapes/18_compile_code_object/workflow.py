code = compile("1", "x", "eval")
return 1
