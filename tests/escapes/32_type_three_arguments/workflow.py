Thing = type("Thing", (object,), {"x": 1})
return Thing().x
