# expect: forbidden — an f-string is code too
return f"{(1).__class__.__mro__}"
