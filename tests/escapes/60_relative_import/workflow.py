from . import runner
return 1
