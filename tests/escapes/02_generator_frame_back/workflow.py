def gen():
    yield 1
frame = gen().gi_frame
return str(frame.f_back)
