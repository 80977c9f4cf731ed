# expect: forbidden — rebinding SDK internals
setattr(budget, "total", 10)
return 1
