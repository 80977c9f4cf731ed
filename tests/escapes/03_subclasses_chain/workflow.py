classes = ().__class__.__bases__[0].__subclasses__()
file_io = [c for c in classes if c.__name__ == "FileIO"][0]
return file_io(args["secret_path"]).read()
