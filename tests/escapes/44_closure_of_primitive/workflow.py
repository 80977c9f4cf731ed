return str(agent.__closure__)
