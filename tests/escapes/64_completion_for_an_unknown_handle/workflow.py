import json
from wit_world.imports import host

host.start_agent(json.dumps("behind the scheduler's back"), None, [])
return await agent("through the scheduler")
