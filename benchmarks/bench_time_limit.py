"""Benchmark: does ``plan(..., time_limit_s=T)`` return within T?

For generated clusters of several sizes (the bench_planner.py generator settings)
and several budgets, run the CP-SAT planner a few times and report the median and
the largest wall time, how far the largest run went over T, and what the planner
did (plan status and solver status). The floor under any budget is preprocessing
plus the first greedy plan, which the planner always computes (its fallback): for
budgets below that floor the wall time is the floor.

    python benchmarks/bench_time_limit.py                      # default sweep
    python benchmarks/bench_time_limit.py --sizes 256:100 --limits 0.1,0.3 --runs 5
    python benchmarks/bench_time_limit.py --out limits.json --md-out limits.md

Clock and warm-up as in bench_planner.py: the clock is around ``plan()``, every
run gets a freshly parsed snapshot, one warm-up plan runs first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_planner import GEN, machine, warm_up
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from models import load_snapshot
from planner import plan
from planner.sim.generate import generate

err = Console(stderr=True)


def _sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        n, _, p = part.partition(":")
        out.append((int(n), int(p) if p else max(1, int(n) // 2)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64:25,256:100,1024:500,2048:1000",
                    help="NODES:PENDING list (default %(default)s)")
    ap.add_argument("--limits", default="0.1,0.3,1,3",
                    help="time_limit_s values (default %(default)s)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="JSON results file")
    ap.add_argument("--md-out", help="also write the Markdown table here")
    args = ap.parse_args(argv)
    sizes = _sizes(args.sizes)
    limits = [float(x) for x in args.limits.split(",")]
    rows: list[dict[str, Any]] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, auto_refresh=False) as prog:
        task = prog.add_task("warm-up", total=len(sizes) * len(limits) * args.runs)
        warm_up(["cpsat"], 2)
        for nodes, pending in sizes:
            prog.update(task, description=f"{nodes} nodes: generate", refresh=True)
            data = generate(nodes=nodes, pending=pending, seed=args.seed, **GEN)
            for limit in limits:
                walls, statuses = [], {}
                for k in range(args.runs):
                    prog.update(task, description=f"{nodes} nodes, {limit:g} s: run {k + 1}", refresh=True)
                    snap = load_snapshot(data)
                    t0 = time.perf_counter()
                    p = plan(snap, time_limit_s=limit, seed=k)
                    walls.append(time.perf_counter() - t0)
                    key = f"{p.status} ({p.solver.status})"
                    statuses[key] = statuses.get(key, 0) + 1
                    prog.advance(task)
                    prog.refresh()  # (no refresh thread: see planner/solver/lanes.py)
                rows.append({"nodes": nodes, "pending": pending, "time_limit_s": limit,
                             "median_wall_s": round(statistics.median(walls), 3),
                             "max_wall_s": round(max(walls), 3),
                             "max_over_s": round(max(walls) - limit, 3),
                             "statuses": statuses})
    md = [("| nodes / pending | time_limit_s | median wall s | max wall s | max over the "
          "limit s | plan status (solver status) x runs |"),
          "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        st = ", ".join(f"{k} x{v}" for k, v in r["statuses"].items())
        over = f"{r['max_over_s']:+.3f}"
        md.append(f"| {r['nodes']:,} / {r['pending']:,} | {r['time_limit_s']:g} | "
                  f"{r['median_wall_s']:.3f} | {r['max_wall_s']:.3f} | {over} | {st} |")
    text = "\n".join(md) + "\n"
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine(),
                                             "command": " ".join(["python", *sys.argv]),
                                             "rows": rows}, indent=1,
                                             default=str) + "\n")
    if args.md_out:
        Path(args.md_out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
