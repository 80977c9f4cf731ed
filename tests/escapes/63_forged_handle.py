# expect: harmless — the scheduler told to wait on a handle the host never issued, beside a real call: the host refuses rather than hang or deliver
# guard: off
# error: uncaught: await-next was called with no call pending
AgentCall = type(agent("never awaited"))

class Forged(AgentCall):
    __slots__ = ()

    def _start(self, path):
        return 424242

scheduler = agent("never awaited")._scheduler
return await parallel([lambda: Forged(scheduler, ()), lambda: agent("real")])
