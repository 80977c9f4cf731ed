# expect: forbidden — format_map with an attribute field
return "{a.cr_frame}".format_map({"a": agent("x")})
