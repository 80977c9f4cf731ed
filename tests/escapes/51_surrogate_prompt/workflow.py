try:
    return await agent("\ud800")
except (ValueError, UnicodeError, TypeError) as error:
    return type(error).__name__
