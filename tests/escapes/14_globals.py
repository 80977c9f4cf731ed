# expect: forbidden — the script's globals
return list(globals())
