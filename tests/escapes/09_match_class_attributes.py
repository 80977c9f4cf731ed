# expect: forbidden — match reads attributes without an attribute expression
match agent("x"):
    case object(cr_frame=frame):
        return str(frame)
return 1
