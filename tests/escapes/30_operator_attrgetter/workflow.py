import operator
try:
    return str(operator.attrgetter("cr_frame.f_globals")(agent("x")))
except AttributeError as error:
    return "blocked: " + str(error)
