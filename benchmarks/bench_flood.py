"""Benchmark: one tick with a flooded queue (a job array of tens of thousands of
tasks), each plan in a fresh process as ``preempt-planner plan`` makes it.

The cluster is ``bench_scale.py``'s (8-GPU nodes, 90% of GPUs held, seed 0) with its
pending jobs replaced by ``--pending`` tasks of a job array: task k is of tier
1 + k mod 3, takes 1, 3, 5 or 8 GPUs (k mod 4), priority k mod 100, all submitted at
once (minimal records, about 70 bytes each). CP-SAT at ``--limit`` as it plans, and
beside it with the cut of flooded kinds switched off (``reduce.CUT_LEAST`` set
above the queue: every task searched, docs/planner.md section 1a), and the greedy
planner; the configurations taken in turn in each round. Reported per
configuration, median (min-max): process wall, plan wall (``solver.wall_s``),
loading, and the plan (admitted GPUs per tier of the worst run, and how many tasks
the cut left out, from ``solver.detail``).

Usage (from the repository root)::

    python benchmarks/bench_flood.py --out benchmarks/results/bench_flood.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

GPUS = (1, 3, 5, 8)


def flood(nodes: int, tasks: int) -> dict[str, Any]:
    """bench_scale's cluster of ``nodes`` nodes with ``tasks`` job-array tasks pending."""
    from benchmarks.bench_scale import GEN
    from planner.sim.generate import generate

    doc = generate(nodes=nodes, pending=100, seed=0, **GEN)
    doc["jobs"] = [j for j in doc["jobs"] if j["state"] != "pending"] + [
        {"id": f"array-{k:07d}", "tier": 1 + k % 3, "state": "pending",
         "gpus_per_node": GPUS[k % 4], "priority": k % 100} for k in range(tasks)]
    return doc


def child(path: str, planner: str, limit: float, started: float, cut: bool) -> dict[str, Any]:
    """One plan in this process (``--child``), as bench_scale.child, with the cut of
    flooded kinds switched off unless ``cut``."""
    from benchmarks.bench_scale import child as scale_child

    if not cut:
        from planner.core import reduce

        reduce.CUT_LEAST = 10**9
    out = scale_child(path, planner, limit, started)
    said = re.search(r"(\d+) pending job\(s\) came after the most jobs of their kind",
                     out["detail"] or "")
    out["cut"] = int(said[1]) if said else 0
    return out


def one_run(path: Path, planner: str, limit: float, cut: bool) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", str(path), planner, str(limit),
                          repr(time.time()), "cut" if cut else "all"],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{planner} at {limit} s on {path} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--pending", default="100000", help="tasks, comma-separated (default "
                    "100000)")
    ap.add_argument("--limit", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        path, planner, limit, started, cut = args.child
        print(json.dumps(child(path, planner, float(limit), float(started), cut == "cut")),
              flush=True)
        os._exit(0)  # (as the command line exits after a plan)

    from benchmarks.bench_planner import compile_sources, machine

    compiled = compile_sources()
    configs = [("cpsat", True), ("cpsat", False), ("greedy", True)]
    results: dict[str, Any] = {"machine": {**machine(), "bytecode_compiled_files": compiled},
                               "command": " ".join(sys.argv), "nodes": args.nodes,
                               "limit_s": args.limit, "queues": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for tasks in (int(x) for x in args.pending.split(",")):
            path = Path(tmp) / f"flood-{tasks}.json"
            path.write_text(json.dumps(flood(args.nodes, tasks), separators=(",", ":")))
            runs: dict[str, list[dict[str, Any]]] = {}
            for r in range(args.runs):
                for planner, cut in configs:
                    name = planner + ("" if cut else ", every task searched")
                    res = one_run(path, planner, args.limit, cut)
                    runs.setdefault(name, []).append(res)
                    print(f"{tasks:>8} tasks run {r + 1}: {name:<30} process "
                          f"{res['process_s']:6.2f} s plan {res['plan_s']:6.2f} s "
                          f"{res['admitted']} cut {res['cut']}", file=sys.stderr, flush=True)
            results["queues"][str(tasks)] = {
                "file_mb": round(path.stat().st_size / 1e6, 1), "runs": runs}
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    for tasks, res in results["queues"].items():
        for name, rs in res["runs"].items():
            def med(k: str, rs: list[dict[str, Any]] = rs) -> str:
                xs = [r[k] for r in rs]
                return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"

            worst = min(rs, key=lambda r: r["key"])
            adm = "/".join(str(worst["admitted"][t]) for t in ("1", "2", "3"))
            print(f"| {int(tasks):,} ({res['file_mb']} MB) | {name} | {med('process_s')} | "
                  f"{med('plan_s')} | {med('load_s')} | {adm} | {worst['cut']:,} |")


if __name__ == "__main__":
    main()
