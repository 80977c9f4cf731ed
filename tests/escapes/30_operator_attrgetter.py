# expect: harmless — operator.attrgetter is a getattr in disguise; the view leaves it out
# result: "blocked: module 'operator' has no attribute 'attrgetter'"
import operator
try:
    return str(operator.attrgetter("cr_frame.f_globals")(agent("x")))
except AttributeError as error:
    return "blocked: " + str(error)
