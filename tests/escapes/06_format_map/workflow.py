return "{a.cr_frame}".format_map({"a": agent("x")})
