# expect: forbidden — locals()
return list(locals())
