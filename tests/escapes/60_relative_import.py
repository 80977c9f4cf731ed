# expect: forbidden — relative imports reach the SDK's package
from . import runner
return 1
