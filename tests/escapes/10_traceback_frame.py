# expect: forbidden — builtins recovered through a traceback's frame
try:
    1 / 0
except ZeroDivisionError as error:
    return error.__traceback__.tb_frame.f_builtins["open"](args["secret_path"]).read()
