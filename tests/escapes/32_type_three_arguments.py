# expect: harmless — making a class with type() gains nothing
Thing = type("Thing", (object,), {"x": 1})
return Thing().x
