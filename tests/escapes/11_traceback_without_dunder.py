# expect: forbidden — with_traceback() hands back the traceback object
try:
    1 / 0
except ZeroDivisionError as error:
    return str(error.with_traceback(None))
