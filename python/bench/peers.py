"""The peers of bench.py: pydantic-monty and pyeryx on the same workloads as flowbox.

A leaf is an async host function `agent(prompt)` that answers "ok" at once or, for the makespan,
after 10 ms under a host-side asyncio.Semaphore(16).

- monty: an AsyncMonty pool of worker processes; cold = a new pool per run, warm = checkout +
  feed_run on a running pool.
- eryx: CPython on wasmtime; cold = a new eryx.Sandbox() and one execute, warm = a lease from a
  SandboxPool (made by a SandboxFactory with the `agent` callback declared in its snapshot) and
  one execute. Every execute runs on a never-used instance: fresh interpreter state, as in
  flowbox. eryx has no inputs and returns the script's `result` variable.

The eryx factory (a one-time compile of tens of seconds) is cached in PEERS_CACHE. Run as a
script (`peers.py monty`), it prints monty's figures alone: the runtime benchmark's peer.
"""

import asyncio
import math
import os
import time

SCALE = float(os.environ.get("PEERS_SCALE", "1"))
CACHE = os.environ.get("PEERS_CACHE", "cache")
IDEAL_MS = math.ceil(1000 / 16) * 10.0


def iters(n):
    return max(1, int(round(n * SCALE)))


def stats(times):
    times = sorted(times)
    return {
        "median_ms": round(times[len(times) // 2] * 1e3, 3),
        "p90_ms": round(times[len(times) * 9 // 10] * 1e3, 3),
        "iterations": len(times),
    }


def unsupported(error):
    return {"unsupported": f"{type(error).__name__}: {error}"[:300]}


def add_makespan_fields(result):
    if "median_ms" in result:
        result["ideal_ms"] = IDEAL_MS
        result["ratio"] = round(result["median_ms"] / IDEAL_MS, 3)
    return result


def add_per_leaf(out):
    par, warm = out.get("parallel_1000", {}), out.get("trivial_warm", {})
    if "median_ms" in par and "median_ms" in warm:
        # (Δ ms) * 1000 µs/ms / 1000 leaves
        out["per_leaf_us"] = round((par["median_ms"] - warm["median_ms"]) * 1000 / 1000, 3)


# The sandboxed programs. monty returns a snippet's trailing expression; eryx returns the
# script's `result` variable, and takes `n` from a prepended assignment (it has no inputs=).
PARALLEL = """
import asyncio
results = await asyncio.gather(*[agent(f'item {i}') for i in range(n)])
"""
PIPELINE = """
import asyncio
async def item(i):
    a = await agent(f'draft {i}')
    b = await agent(f'review {i}')
    return await agent(f'polish {i}')
results = await asyncio.gather(*[item(i) for i in range(n)])
"""
MONTY_TRIVIAL = "1"
MONTY_PARALLEL = PARALLEL + "len(results)\n"
MONTY_PIPELINE = PIPELINE + "len(results)\n"
ERYX_TRIVIAL = "result = 1"
ERYX_PARALLEL = PARALLEL + "result = len(results)\n"
ERYX_PIPELINE = PIPELINE + "result = len(results)\n"


async def instant(prompt):
    return "ok"


# ----------------------------------------------------------------------------- monty


async def monty_bench():
    import pydantic_monty
    from pydantic_monty import AsyncMonty

    out = {"version": pydantic_monty.__version__}

    async def timed(pool, code, n, leaf, iterations, expect):
        times = []
        for i in range(iterations + 1):  # the first run is a warm-up
            start = time.perf_counter()
            # A leaf is one suspension; the default cap of 1000 would stop a 1000-leaf fan-out.
            async with pool.checkout(limits={"max_suspensions": 100_000}) as session:
                result = await session.feed_run(
                    code, inputs={"n": n}, external_lookup={"agent": leaf}
                )
            elapsed = time.perf_counter() - start
            assert result == expect, result
            if i:
                times.append(elapsed)
        return stats(times)

    times = []
    for _ in range(iters(20)):
        start = time.perf_counter()
        async with AsyncMonty(min_processes=1, max_processes=1) as pool:
            async with pool.checkout() as session:
                assert await session.feed_run(MONTY_TRIVIAL) == 1
        times.append(time.perf_counter() - start)
    out["trivial_cold"] = stats(times)

    async with AsyncMonty(min_processes=2, max_processes=2) as pool:
        out["trivial_warm"] = await timed(pool, MONTY_TRIVIAL, 1, instant, iters(200), 1)
        for name, code, n, expect, iterations in [
            ("parallel_1000", MONTY_PARALLEL, 1000, 1000, iters(15)),
            ("pipeline_3x100", MONTY_PIPELINE, 100, 100, iters(30)),
        ]:
            try:
                out[name] = await timed(pool, code, n, instant, iterations, expect)
            except Exception as error:  # the peer cannot express the workload
                out[name] = unsupported(error)

        slots = asyncio.Semaphore(16)

        async def slow(prompt):
            async with slots:
                await asyncio.sleep(0.01)
            return "ok"

        try:
            out["makespan_1000x10ms_c16"] = add_makespan_fields(
                await timed(pool, MONTY_PARALLEL, 1000, slow, iters(5), 1000)
            )
        except Exception as error:
            out["makespan_1000x10ms_c16"] = unsupported(error)
    add_per_leaf(out)
    out["mode"] = {
        "trivial_cold": "new AsyncMonty(min_processes=1) pool + checkout + feed_run('1')",
        "warm": "AsyncMonty(min_processes=2) pool; per run: checkout() + feed_run(code)",
    }
    return out


# ----------------------------------------------------------------------------- eryx


def eryx_factory(eryx, callbacks):
    """A SandboxFactory with the `agent` declaration baked into its snapshot, cached on disk."""
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, f"eryx-{eryx.__version__}-agent-factory.bin")
    start = time.perf_counter()
    if os.path.exists(path):
        factory = eryx.SandboxFactory.load(path, callbacks=callbacks)
        how = "loaded from cache"
    else:
        factory = eryx.SandboxFactory(callbacks=callbacks)
        factory.save(path)
        how = "built (one-time) and cached"
    return factory, {"how": how, "ms": round((time.perf_counter() - start) * 1e3, 1), "path": path}


def eryx_bench():
    import eryx

    out = {"version": eryx.__version__}
    limits = eryx.ResourceLimits(max_callback_invocations=100_000)  # default cap is 1000
    callbacks = [{"name": "agent", "fn": instant}]

    def check(result, expect, leaves):
        assert result.result == expect, (result.result, result.result_error, result.stderr_text)
        assert result.callback_invocations == leaves, result.callback_invocations

    # -- trivial_cold: a brand-new Sandbox (embedded pre-initialised runtime) + one execute.
    # The first one in the process also loads the embedded precompiled component.
    start = time.perf_counter()
    check(eryx.Sandbox().execute(ERYX_TRIVIAL), 1, 0)
    first_ms = round((time.perf_counter() - start) * 1e3, 3)
    times = []
    for _ in range(iters(20)):
        start = time.perf_counter()
        sandbox = eryx.Sandbox()
        check(sandbox.execute(ERYX_TRIVIAL), 1, 0)
        times.append(time.perf_counter() - start)
        del sandbox
    out["trivial_cold"] = stats(times)
    out["trivial_cold"]["first_in_process_ms"] = first_ms

    # -- the warm mode: SandboxPool lease + execute, fresh interpreter state per execute.
    factory, factory_info = eryx_factory(eryx, callbacks)
    pool = factory.create_pool(max_size=2, min_idle=1)

    def timed(code, n, leaf_callbacks, iterations, expect, leaves):
        source = f"n = {n}\n{code}"
        times = []
        for i in range(iterations + 1):  # the first run is a warm-up
            start = time.perf_counter()
            with pool.acquire(resource_limits=limits, callbacks=leaf_callbacks) as sandbox:
                result = sandbox.execute(source)
            elapsed = time.perf_counter() - start
            check(result, expect, leaves)
            if i:
                times.append(elapsed)
        return stats(times)

    out["trivial_warm"] = timed(ERYX_TRIVIAL, 1, callbacks, iters(200), 1, 0)
    for name, code, n, expect, leaves, iterations in [
        ("parallel_1000", ERYX_PARALLEL, 1000, 1000, 1000, iters(15)),
        ("pipeline_3x100", ERYX_PIPELINE, 100, 100, 300, iters(30)),
    ]:
        try:
            out[name] = timed(code, n, callbacks, iterations, expect, leaves)
        except Exception as error:
            out[name] = unsupported(error)

    # -- makespan. eryx runs each async callback with asyncio.run() on a worker thread, i.e. in
    # a fresh event loop per call, so one asyncio.Semaphore cannot be shared by the callbacks
    # directly. The leaf forwards to the host's own event loop, where the Semaphore(16) lives;
    # execute() (synchronous) runs in a thread so that loop stays free.
    async def makespan():
        host_loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(16)

        async def slow(prompt):
            async with slots:
                await asyncio.sleep(0.01)
            return "ok"

        async def agent(prompt):
            return await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(slow(prompt), host_loop)
            )

        slow_callbacks = [{"name": "agent", "fn": agent}]
        return await asyncio.to_thread(
            timed, ERYX_PARALLEL, 1000, slow_callbacks, iters(5), 1000, 1000
        )

    try:
        out["makespan_1000x10ms_c16"] = add_makespan_fields(asyncio.run(makespan()))
    except Exception as error:
        out["makespan_1000x10ms_c16"] = unsupported(error)
    add_per_leaf(out)

    pool.close()

    out["mode"] = {
        "trivial_cold": "eryx.Sandbox() + execute('result = 1') per run, in-process",
        "warm": "SandboxFactory(callbacks=[agent]) -> create_pool(max_size=2, min_idle=1); per run: "
        "pool.acquire(resource_limits, callbacks) + PooledSandbox.execute(code); each execute "
        "runs on a never-used wasm instance (fresh interpreter state)",
        "leaf": "async def agent(prompt) registered as a callback; sandbox calls await agent(...); "
        "eryx runs each async callback via asyncio.run on a worker thread",
        "factory": factory_info,
    }
    return out


if __name__ == "__main__":
    # `python peers.py monty`: monty's figures alone, as JSON (the runtime benchmark's peer).
    import json
    import os
    import sys

    assert sys.argv[1:] == ["monty"], "usage: peers.py monty"
    print(json.dumps(asyncio.run(monty_bench())), flush=True)
    # pydantic-monty aborts the interpreter while it shuts down; the figures are out.
    os._exit(0)
