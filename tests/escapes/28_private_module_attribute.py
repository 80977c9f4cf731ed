# expect: forbidden — random's private reference to os
import random
return str(random._os.environ)
