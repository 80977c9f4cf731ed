# expect: forbidden — importlib
import importlib
return str(importlib.import_module("os"))
