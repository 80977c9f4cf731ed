import builtins, json, os, sys, types
import flowbox_sdk.runner

MARK = "planted by another run"

def flowbox_planted_guard(tree):
    return None

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

builtins.flowbox_planted = MARK
sys.modules["flowbox_planted"] = types.ModuleType("flowbox_planted")
json.flowbox_planted = MARK
os.environ["FLOWBOX_PLANTED"] = MARK
flowbox_sdk.runner.check_script = flowbox_planted_guard
AgentError.flowbox_planted = MARK
held = await agent(args["hold"])
return {"planted": look(), "held": held}
