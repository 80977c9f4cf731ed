return f"{(1).__class__.__mro__}"
