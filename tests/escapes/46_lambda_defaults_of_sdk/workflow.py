return str(agent.__kwdefaults__)
