# expect: forbidden — import os
import os
return dict(os.environ)
