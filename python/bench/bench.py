"""`make bench`'s Python figures: flowbox from Python and its two peers, pydantic-monty and
pyeryx, in one process on the same workloads. Writes target/bench/python.json and prints the
flowbox/peer ratios.

Workloads: a trivial script cold and warm; `parallel` of 1000 instant Python leaves (per-leaf
overhead, the crossing into Python included); a 3-stage pipeline over 100 items; the makespan of
1000 Python leaves of 10 ms at concurrency 16.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import flowbox_bench
import peers


def ratio(ours: float, theirs: float) -> float:
    return round(ours / theirs, 3)


def main(out_path: str) -> None:
    figures = {"flowbox": asyncio.run(flowbox_bench.figures())}
    figures["monty"] = asyncio.run(peers.monty_bench())
    figures["eryx"] = peers.eryx_bench()
    ours = figures["flowbox"]
    ratios = {}
    for peer in ("monty", "eryx"):
        theirs = figures[peer]
        ratios[peer] = {
            "trivial_warm": ratio(
                ours["trivial_warm"]["median_ms"], theirs["trivial_warm"]["median_ms"]
            ),
            "trivial_cold": ratio(
                ours["trivial_fresh"]["median_ms"], theirs["trivial_cold"]["median_ms"]
            ),
            "per_leaf": ratio(ours["per_leaf_us"]["parallel"], theirs["per_leaf_us"]),
            "pipeline_3x100": ratio(
                ours["pipeline_3x100"]["median_ms"], theirs["pipeline_3x100"]["median_ms"]
            ),
            "makespan": ratio(
                ours["makespan_1000x10ms_c16"]["median_ms"],
                theirs["makespan_1000x10ms_c16"]["median_ms"],
            ),
        }
    figures["flowbox_over_peer"] = ratios
    figures["python"] = sys.version.split()[0]
    with open(out_path, "w") as f:
        json.dump(figures, f, indent=1)
    print(json.dumps({"flowbox": ours["per_leaf_us"], "flowbox_over_peer": ratios}, indent=1))
    print(f"wrote {out_path}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
    # pydantic-monty aborts the interpreter while it shuts down; the figures are out.
    os._exit(0)
