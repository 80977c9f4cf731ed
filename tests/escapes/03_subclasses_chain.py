# expect: forbidden — the classic object.__subclasses__() walk
classes = ().__class__.__bases__[0].__subclasses__()
return [c.__name__ for c in classes]
