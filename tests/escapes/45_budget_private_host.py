# expect: forbidden — the budget object's host reference
return str(budget._host)
