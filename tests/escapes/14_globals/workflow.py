return list(globals())
