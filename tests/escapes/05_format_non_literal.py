# expect: forbidden — format on a string built at run time
template = "{0." + "cr_frame}"
return template.format(agent("x"))
