# expect: forbidden — dir() of the primitives
return dir(agent)
