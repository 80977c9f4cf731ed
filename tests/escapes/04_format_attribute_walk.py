# expect: forbidden — str.format reaching attributes without a dot in the code
return "{0.__class__.__init__.__globals__}".format(agent)
