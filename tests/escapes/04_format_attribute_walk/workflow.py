return "{0.__class__.__init__.__globals__}".format(agent)
