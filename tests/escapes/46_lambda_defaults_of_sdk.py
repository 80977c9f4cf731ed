# expect: forbidden — function defaults and keyword defaults of SDK functions
return str(agent.__kwdefaults__)
