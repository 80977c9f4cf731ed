import json
from wit_world.imports import host

def await_raw():
    try:
        return [
            [handle, reply if text else json.loads(reply)]
            for handle, reply, _, text in host.await_next()
        ]
    except Exception as error:
        return "refused: " + error.value.message

nothing_started = await_raw()
host.start_agent(json.dumps("mine"), None, [])
own_call = await_raw()
all_delivered = await_raw()
return [nothing_started, own_call, all_delivered]
