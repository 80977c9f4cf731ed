# expect: forbidden — a class with __getattr__ is not glue code
class Proxy:
    def __getattr__(self, name):
        return name
return Proxy().anything
