breakpoint()
return 1
