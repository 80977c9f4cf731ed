return str(agent("x").__await__())
