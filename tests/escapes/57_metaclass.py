# expect: harmless — a metaclass gains nothing
# result: "<class 'workflow.__flowbox_body__.<locals>.Meta'>"
class Meta(type):
    pass
class Thing(metaclass=Meta):
    pass
return str(type(Thing))
