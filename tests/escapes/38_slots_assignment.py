# expect: forbidden — dunder assignments in a class body
class Point:
    __slots__ = ("x",)
return 1
