class Meta(type):
    pass
class Thing(metaclass=Meta):
    pass
return str(type(Thing))
