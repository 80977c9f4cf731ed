AgentCall = type(agent("never awaited"))

class Forged(AgentCall):
    __slots__ = ()

    def _start(self, path):
        return 424242

scheduler = agent("never awaited")._scheduler
return await parallel([lambda: Forged(scheduler, "", None), lambda: agent("real")])
