try:
    try:
        1 / 0
    except ZeroDivisionError:
        raise ValueError("x")
except ValueError as error:
    return str(error.__context__)
