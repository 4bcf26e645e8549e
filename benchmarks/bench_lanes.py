"""Benchmark: what the second lane (planner/solver/lanes.py) changes in the plans.

Random generated clusters of 768-2,048 nodes (seeded), where the whole CP-SAT
model does not fit in the budget (1 s up to 1,024 nodes, 2 s above), some with a
tight ``grace.max_s`` so that the storage I/O-storm limit binds. Each cluster is
planned ``--runs`` times with the second lane and as many times without it
(``planner.solver.lanes.ENABLED``), alternating which goes first, and the plans are
compared lexicographically (``objective_of(...).key()``): per pair of runs, and
best and worst of the runs. Plans on 2 cores vary from run to run (the machine's
speed decides how far each step gets), so the report also counts the clusters
whose runs differ among themselves with the same setting.

    python benchmarks/bench_lanes.py --clusters 30 --runs 2 --out lanes.json
    python benchmarks/bench_lanes.py --clusters 30 --storm-only --seed 4242
    python benchmarks/bench_lanes.py --clusters 30 --budgets --time-limit 0.5

Clock and warm-up as in bench_planner.py; the snapshot of a cluster is generated
once and parsed afresh for every run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_planner import machine, warm_up
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from models import load_snapshot
from planner import plan
from planner.sim.generate import generate
from planner.solver import lanes

err = Console(stderr=True)


def clusters(n: int, seed: int, storm_only: bool, budgets: bool = False,
             time_limit_s: float | None = None) -> list[dict[str, Any]]:
    """``n`` cluster specs: generator settings, policy and time limit."""
    r = random.Random(seed)
    out = []
    for i in range(n):
        nodes = r.choice([768, 1024, 1024, 1536, 2048])
        gen = {"nodes": nodes, "pending": int(nodes * r.uniform(0.25, 0.6)),
               "seed": r.randrange(10**6), "occupancy": r.uniform(0.85, 0.95),
               "immune_share": r.uniform(0, 0.3), "multinode_share": r.uniform(0.05, 0.3),
               "pools": r.random() < 0.5, "storage_per_blocks": r.choice([4, 8])}
        if storm_only:
            grace = {"max_s": r.choice([40, 40, 60]), "min_s": 0, "safety": 1}
        else:
            grace = r.choice([None, None, {"max_s": 40, "min_s": 0, "safety": 1},
                              {"max_s": 60, "min_s": 0, "safety": 1},
                              {"max_s": 120, "min_s": 30, "safety": 1.5}])
        policy = {"max_evictions_per_tick": r.randrange(5, 61)} if budgets else {}
        out.append({"id": i, "gen": gen, "grace": grace, "policy": policy,
                    "time_limit_s": time_limit_s or (1.0 if nodes <= 1024 else 2.0)})
    return out


def one(snap: dict[str, Any], time_limit_s: float, lane: bool) -> dict[str, Any]:
    lanes.ENABLED = lane
    s = load_snapshot(snap)
    t = time.perf_counter()
    p = plan(s, time_limit_s=time_limit_s)
    wall = time.perf_counter() - t
    o = p.objective
    key = [*(o.admitted_gpus.get(str(t), 0) for t in (1, 2, 3)), o.priority_value,
           -round(o.eviction_cost_gpu_s, 3), -o.evictions]
    return {"key": key, "wall_s": round(wall, 4),
            "lane_won": "the second lane's" in p.solver.detail}


def _cmp(a: list, b: list) -> str:
    return "better" if a > b else "worse" if a < b else "same"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clusters", type=int, default=30)
    ap.add_argument("--runs", type=int, default=2, help="runs per cluster and setting")
    ap.add_argument("--seed", type=int, default=1313)
    ap.add_argument("--storm-only", action="store_true",
                    help="every cluster with grace.max_s 40-60 s (the storm limit binds)")
    ap.add_argument("--budgets", action="store_true",
                    help="every cluster with max_evictions_per_tick 5-60 (a count budget)")
    ap.add_argument("--time-limit", type=float, metavar="S",
                    help="time_limit_s for every cluster (default 1 s up to 1,024 nodes, 2 s "
                         "above)")
    ap.add_argument("--out", help="write the results as JSON")
    args = ap.parse_args()
    warm_up(["cpsat"], 2)
    specs = clusters(args.clusters, args.seed, args.storm_only, args.budgets, args.time_limit)
    rows = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, auto_refresh=False) as bar:
        task = bar.add_task("clusters", total=len(specs))
        for sp in specs:
            snap = generate(**sp["gen"])
            if sp["grace"]:
                snap["policy"]["grace"] = sp["grace"]
            snap["policy"].update(sp["policy"])
            on: list[dict] = []
            off: list[dict] = []
            for k in range(args.runs):
                order = [(True, on), (False, off)]
                for lane, into in (order if (sp["id"] + k) % 2 == 0 else order[::-1]):
                    into.append(one(snap, sp["time_limit_s"], lane))
            rows.append({**sp, "with_lane": on, "without": off})
            bar.advance(task)
            bar.refresh()  # (no refresh thread, which would keep the lane off)
            bar.refresh()  # (no refresh thread: see planner/solver/lanes.py)
    lanes.ENABLED = True
    pairs = {"better": 0, "worse": 0, "same": 0}
    best = dict(pairs)
    worst = dict(pairs)
    for r in rows:
        for a, b in zip(r["with_lane"], r["without"]):
            pairs[_cmp(a["key"], b["key"])] += 1
        best[_cmp(max(x["key"] for x in r["with_lane"]), max(x["key"] for x in r["without"]))] += 1
        worst[_cmp(min(x["key"] for x in r["with_lane"]),
                   min(x["key"] for x in r["without"]))] += 1
    share = [x["wall_s"] / r["time_limit_s"] for r in rows for x in r["with_lane"]]
    share_off = [x["wall_s"] / r["time_limit_s"] for r in rows for x in r["without"]]
    summary = {
        "runs_with_lane_vs_without": pairs, "best_of_runs": best, "worst_of_runs": worst,
        "clusters_whose_runs_differ": {
            "with_lane": sum(len({tuple(x["key"]) for x in r["with_lane"]}) > 1 for r in rows),
            "without": sum(len({tuple(x["key"]) for x in r["without"]}) > 1 for r in rows)},
        "runs_where_the_lanes_plan_won": sum(x["lane_won"] for r in rows for x in r["with_lane"]),
        "wall_over_limit_median": {"with_lane": round(statistics.median(share), 3),
                                   "without": round(statistics.median(share_off), 3)},
        "wall_over_limit_max": {"with_lane": round(max(share), 3),
                                "without": round(max(share_off), 3)},
    }
    for r in rows:
        g = r["grace"]["max_s"] if r["grace"] else "-"
        print(f"{r['id']:3d} {r['gen']['nodes']:5d} nodes {r['time_limit_s']:.0f} s grace {g}: "
              f"with {[x['key'][:3] for x in r['with_lane']]} "
              f"without {[x['key'][:3] for x in r['without']]}")
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine(), "date": time.strftime(
            "%Y-%m-%d"), "command": " ".join(["python", *sys.argv]), "args": vars(args),
                                              "summary": summary, "clusters": rows}, indent=1))


if __name__ == "__main__":
    main()
