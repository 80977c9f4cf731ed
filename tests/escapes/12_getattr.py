# expect: forbidden — getattr with a computed name
return str(getattr(agent, "__glo" + "bals__"))
