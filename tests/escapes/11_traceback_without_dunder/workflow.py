try:
    1 / 0
except ZeroDivisionError as error:
    return str(error.with_traceback(None))
