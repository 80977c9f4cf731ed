# expect: forbidden — type(x).__dict__ gives the class namespace
return str(type(budget).__dict__)
