setattr(budget, "total", 10)
return 1
