# expect: forbidden — open() the host's secret file
return open(args["secret_path"]).read()
