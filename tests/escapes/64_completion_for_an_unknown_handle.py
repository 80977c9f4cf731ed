# expect: harmless — a call started behind the scheduler's back: its completion names a handle the scheduler never issued
# guard: off
# error: uncaught: the host completed an unknown call 1
import json
from wit_world.imports import host

host.start_agent(json.dumps("behind the scheduler's back"), None, [])
return await agent("through the scheduler")
