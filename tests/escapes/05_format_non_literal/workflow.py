template = "{0." + "cr_frame}"
return template.format(agent("x"))
