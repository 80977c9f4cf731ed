# expect: forbidden — sys.modules is a way to everything
import sys
return list(sys.modules)
