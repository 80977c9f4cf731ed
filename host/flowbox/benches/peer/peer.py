"""The peer comparison for `make bench`: the same workloads as flowbox's, on pydantic-monty.

Prints one JSON object: each workload's median and p90 in milliseconds, or why the peer cannot
express it. Leaves are host coroutines the sandbox awaits, answering at once (or after 10 ms,
16 at a time, for the makespan), like flowbox's fake and scripted backends.
"""

import asyncio
import json
import math
import os
import sys
import time

import pydantic_monty
from pydantic_monty import AsyncMonty

TRIVIAL = "1"
PARALLEL = """
import asyncio
results = await asyncio.gather(*[agent(f'item {i}') for i in range(n)])
len(results)
"""
PIPELINE = """
import asyncio
async def item(i):
    a = await agent(f'draft {i}')
    b = await agent(f'review {i}')
    return await agent(f'polish {i}')
results = await asyncio.gather(*[item(i) for i in range(n)])
len(results)
"""


def stats(times):
    times = sorted(times)
    return {
        "median_ms": round(times[len(times) // 2] * 1e3, 3),
        "p90_ms": round(times[len(times) * 9 // 10] * 1e3, 3),
        "iterations": len(times),
    }


async def instant(prompt):
    return "ok"


async def timed(pool, code, n, leaf, iterations):
    """Runs `code` in a session checked out of a warm pool, `iterations` times after one."""
    times = []
    for i in range(iterations + 1):
        start = time.perf_counter()
        # A leaf is one suspension; the default cap of 1000 would stop a 1000-leaf fan-out.
        async with pool.checkout(limits={"max_suspensions": 100_000}) as session:
            result = await session.feed_run(code, inputs={"n": n}, external_lookup={"agent": leaf})
        elapsed = time.perf_counter() - start
        assert result in (1, n), result
        if i:
            times.append(elapsed)
    return stats(times)


async def cold(iterations):
    """A new pool (a worker process started) per run: the peer's cold start."""
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        async with AsyncMonty(min_processes=1, max_processes=1) as pool:
            async with pool.checkout() as session:
                assert await session.feed_run(TRIVIAL) == 1
        times.append(time.perf_counter() - start)
    return stats(times)


async def main():
    out = {"version": pydantic_monty.__version__}
    out["trivial_cold"] = await cold(20)
    async with AsyncMonty(min_processes=2, max_processes=2) as pool:
        out["trivial_warm"] = await timed(pool, TRIVIAL, 1, instant, 200)
        for name, code, n, iterations in [
            ("parallel_1000", PARALLEL, 1000, 15),
            ("pipeline_3x100", PIPELINE, 100, 30),
        ]:
            try:
                out[name] = await timed(pool, code, n, instant, iterations)
            except Exception as error:  # the peer cannot express the workload
                out[name] = {"unsupported": f"{type(error).__name__}: {error}"[:300]}
        slots = asyncio.Semaphore(16)

        async def slow(prompt):
            async with slots:
                await asyncio.sleep(0.01)
            return "ok"

        try:
            makespan = await timed(pool, PARALLEL, 1000, slow, 5)
            ideal = math.ceil(1000 / 16) * 10.0
            makespan["ideal_ms"] = ideal
            makespan["ratio"] = round(makespan["median_ms"] / ideal, 3)
            out["makespan_1000x10ms_c16"] = makespan
        except Exception as error:
            out["makespan_1000x10ms_c16"] = {"unsupported": f"{type(error).__name__}: {error}"[:300]}
    print(json.dumps(out), flush=True)


asyncio.run(main())
# pydantic-monty 1.4.0 aborts the interpreter while it shuts down; the figures are out.
os._exit(0)
