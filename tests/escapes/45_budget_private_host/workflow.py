return str(budget._host)
