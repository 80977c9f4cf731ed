return dir(agent)
