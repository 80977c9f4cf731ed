c = agent("x")
g = c.cr_frame.f_globals
return 1
