return list(locals())
