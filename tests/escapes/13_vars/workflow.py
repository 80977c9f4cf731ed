return str(vars(budget))
