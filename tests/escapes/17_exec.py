# expect: forbidden — exec of a string
exec("import os")
return 1
