# expect: forbidden — the debugger
breakpoint()
return 1
