"""flowbox's side of the Python benchmark (bench.py): the workloads run from Python, with
leaves answered by Python coroutines, and the same scripts on the built-in fake backend, whose
leaves never cross into Python, for the cost of the crossing."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import flowbox

TRIVIAL = "return 1"
PARALLEL = """
results = await parallel([lambda i=i: agent(f'item {i}') for i in range(args['n'])])
return len(results)
"""
PIPELINE = """
async def draft(item):
    return await agent(f'draft {item}')
async def review(prev, item):
    return await agent(f'review {item}')
async def polish(prev, item, index):
    return await agent(f'polish {index}')
results = await pipeline(list(range(args['n'])), draft, review, polish)
return len(results)
"""


def stats(times: list[float]) -> dict[str, Any]:
    times = sorted(times)
    return {
        "median_ms": round(times[len(times) // 2] * 1e3, 3),
        "p90_ms": round(times[len(times) * 9 // 10] * 1e3, 3),
        "iterations": len(times),
    }


async def instant(request: flowbox.LeafRequest) -> str:
    return "ok"


async def timed(
    rt: flowbox.Runtime,
    script: str,
    args: Any,
    expected: Any,
    iterations: int,
    full_pool: bool = False,
) -> dict[str, Any]:
    """Runs `script` `iterations` times after one warm-up run (each once the warm pool is full
    again, with `full_pool`, as the runtime benchmark measures it)."""
    times = []
    for i in range(iterations + 1):
        while full_pool and (pool := rt.warm_pool) and pool["ready"] < pool["capacity"]:
            await asyncio.sleep(0.001)
        start = time.perf_counter()
        outcome = await rt.run(script, args)
        elapsed = time.perf_counter() - start
        assert outcome.unwrap() == expected, outcome.error
        if i:
            times.append(elapsed)
    return stats(times)


async def figures() -> dict[str, Any]:
    out: dict[str, Any] = {"version": "0.1.0"}
    builds = []
    for _ in range(10):
        start = time.perf_counter()
        with flowbox.Runtime(instant):
            builds.append(time.perf_counter() - start)
    out["runtime_build"] = stats(builds)

    with flowbox.Runtime(instant) as fresh:
        out["trivial_fresh"] = await timed(fresh, TRIVIAL, None, 1, 200)
        out["parallel_1000"] = await timed(fresh, PARALLEL, {"n": 1000}, 1000, 15)
        out["pipeline_3x100"] = await timed(fresh, PIPELINE, {"n": 100}, 100, 30)
    with flowbox.Runtime(instant, warm_pool=4) as pooled:
        out["trivial_warm"] = await timed(pooled, TRIVIAL, None, 1, 200, full_pool=True)
    with flowbox.Runtime("fake") as fake:
        out["rust_leaves"] = {
            "trivial_fresh": await timed(fake, TRIVIAL, None, 1, 200),
            "parallel_1000": await timed(fake, PARALLEL, {"n": 1000}, 1000, 15),
            "pipeline_3x100": await timed(fake, PIPELINE, {"n": 100}, 100, 30),
        }

    def per_leaf(figures: dict[str, Any], workload: str, leaves: int) -> float:
        extra = figures[workload]["median_ms"] - figures["trivial_fresh"]["median_ms"]
        return round(extra * 1e3 / leaves, 2)

    out["per_leaf_us"] = {
        "parallel": per_leaf(out, "parallel_1000", 1000),
        "pipeline": per_leaf(out, "pipeline_3x100", 300),
        "parallel_rust_leaves": per_leaf(out["rust_leaves"], "parallel_1000", 1000),
        "pipeline_rust_leaves": per_leaf(out["rust_leaves"], "pipeline_3x100", 300),
    }

    slots = asyncio.Semaphore(16)

    async def slow(request: flowbox.LeafRequest) -> str:
        async with slots:
            await asyncio.sleep(0.01)
        return "ok"

    limits = flowbox.Limits(max_concurrency=16)
    with flowbox.Runtime(slow, limits=limits) as rt:
        makespan = await timed(rt, PARALLEL, {"n": 1000}, 1000, 5)
    makespan["ideal_ms"] = math.ceil(1000 / 16) * 10.0
    makespan["ratio"] = round(makespan["median_ms"] / makespan["ideal_ms"], 3)
    out["makespan_1000x10ms_c16"] = makespan
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(asyncio.run(figures()), indent=1))
