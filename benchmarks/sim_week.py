"""Benchmark: one simulated week of the Philly trace on the 1,024-GPU cluster.

The week of docs/simulation.md: jobs submitted 2017-10-04 00:00 to 2017-10-11 00:00
UTC (the busiest week of the Sep-Oct file), with the carry-over warm start, on
``tests/data/sim/cluster-1024.yaml`` (128 nodes x 8 GPUs, 4 x 20 GB/s NFS), default
policy, 60 s ticks, seed 0. Target: the cpsat run finishes within 10 minutes on
a 2-core machine.

    python benchmarks/sim_week.py                     # cpsat, prints a JSON summary
    python benchmarks/sim_week.py --planner naive --days 1
    python benchmarks/sim_week.py --max-wall 600      # exit 1 when slower

Reports the wall time, the wall time per simulated day, the planner's share of it
and the run's headline metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from planner.sim.metrics import compute_metrics
from planner.sim.runner import RunSpec, parse_time, prepare

CLUSTER = REPO / "tests" / "data" / "sim" / "cluster-1024.yaml"
TRACE = "philly-2017-09-10.csv"  # found in ../shared/traces
START = "2017-10-04T00:00:00Z"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--planner", default="cpsat")
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--max-wall", type=float, default=600.0,
                    help="fail (exit 1) when the simulation takes longer (seconds)")
    ap.add_argument("--out", help="also write the summary JSON here")
    args = ap.parse_args(argv)
    spec = RunSpec(cluster=str(CLUSTER), trace=TRACE, carry_over=True,
                   config={"planner": args.planner, "tick_s": 60.0, "days": args.days,
                           "start": parse_time(START), "seed": 0,
                           "time_limit_s": args.time_limit, "workers": 2})
    t0 = time.perf_counter()
    sim = prepare(spec)
    load_s = time.perf_counter() - t0
    res = sim.run()
    wall = time.perf_counter() - t0
    m = compute_metrics(res)
    summary = {
        "planner": args.planner, "days": args.days, "jobs": m["jobs"],
        "load_s": round(load_s, 2),
        "wall_s": round(wall, 1),
        "wall_s_per_sim_day": round(wall / args.days, 1),
        "planner_calls": m["planner_calls"],
        "planner_wall_s": round(m["planner_wall_s"], 1),
        "planner_mean_ms": round(1000 * m["planner_wall_s"] / max(1, m["planner_calls"]), 1),
        "planner_max_s": round(m["planner_max_wall_s"], 2),
        "ticks_recorded": len(res.samples["t"]),
        "ticks_in_period": int(args.days * 86400 / 60),
        "goodput": round(m["goodput"], 5),
        "wasted_gpu_h": round(m["wasted_gpu_h"]["total"], 1),
        "evictions": m["evictions"],
        "thrash_windows": m["thrash_windows"],
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        from bench_planner import machine

        result = {"machine": machine(), "command": " ".join(["python", *sys.argv]), **summary}
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if wall > args.max_wall:
        print(f"FAIL: {wall:.0f} s > {args.max_wall:.0f} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
