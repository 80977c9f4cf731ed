# expect: harmless — making a class with type() gains nothing
# result: 1
Thing = type("Thing", (object,), {"x": 1})
return Thing().x
