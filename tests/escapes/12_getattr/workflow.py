return str(getattr(agent, "__glo" + "bals__"))
