class Point:
    __slots__ = ("x",)
return 1
