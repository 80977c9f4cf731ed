"""Integers of any size come back digit for digit."""
return {"huge": 10**400, "below": -(10**400) - 1}
