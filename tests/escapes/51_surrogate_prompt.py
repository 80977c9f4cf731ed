# expect: harmless — a string that is not valid UTF-8 cannot cross the boundary
# result: "ValueError"
try:
    return await agent("\ud800")
except (ValueError, UnicodeError, TypeError) as error:
    return type(error).__name__
