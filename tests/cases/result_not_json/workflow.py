"""A result that is not JSON: the error names the path and the line of the return."""
values = [1, 2, float("inf")]
return {"ok": values}
