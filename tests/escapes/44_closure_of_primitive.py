# expect: forbidden — a primitive's closure cells hold the host
return str(agent.__closure__)
