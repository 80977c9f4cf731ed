# expect: forbidden — vars() of an SDK object
return str(vars(budget))
