# expect: forbidden — random's private reference to os
import random
return random._os.environ.get(args["secret_env"])
