import builtins, json, os, sys
import flowbox_sdk.runner
from wit_world.imports import host

MARK = "planted by another run"

def look():
    found = []
    if getattr(builtins, "flowbox_planted", None) == MARK:
        found.append("builtins")
    if "flowbox_planted" in sys.modules:
        found.append("sys.modules")
    if getattr(json, "flowbox_planted", None) == MARK:
        found.append("module attribute")
    if os.environ.get("FLOWBOX_PLANTED") == MARK:
        found.append("environment")
    if flowbox_sdk.runner.check_script.__name__ == "flowbox_planted_guard":
        found.append("patched guard")
    if getattr(AgentError, "flowbox_planted", None) == MARK:
        found.append("exception class")
    return found

# The other run's call is pending on the host, and handles are numbered per run: this run
# has nothing pending, and its own first call is number 1 again.
try:
    host.await_next()
    pending = "delivered another run's completion"
except Exception as error:
    pending = "refused: " + error.value.message
first_handle, _ = host.start_agent(json.dumps("mine"), None, [])
host.await_next()
return {"found": look(), "await_next": pending, "first_handle": first_handle}
