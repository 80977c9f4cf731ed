match agent("x"):
    case object(cr_frame=frame):
        return str(frame)
return 1
