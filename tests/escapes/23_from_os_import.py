# expect: forbidden — from-import of a module outside the allowlist
from os import environ
return environ.get(args["secret_env"])
