return {"ok": [1, 2, float("inf")]}
