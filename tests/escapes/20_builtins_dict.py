# expect: forbidden — the builtins mapping
return str(__builtins__["open"])
