x = agent("a")
y = x.__class__
return 1
