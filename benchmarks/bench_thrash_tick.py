"""Benchmark: one big tick with the default policy stays within the rolling eviction budget.

A generated cluster (``planner.sim.generate``: 8-GPU nodes, 90% of GPUs held, the
default tier and NVLink mix, seed 0; 12,500 nodes and 5,000 pending jobs by
default) is planned with the default policy, whose rolling eviction budget (R15)
allows ``max(min_evictions, floor(max_fraction x running jobs))`` evictions per
hour (and, where ``max_gpu_fraction`` is set, that share of the GPUs), none of them
spent yet (no ``recent_evictions``), and, for comparison, with ``"thrash": null``.
Reported per run: wall time, evictions in all, those of exempt tiers' placements
(tier 1) and the others, the GPUs they free, the budget B (and the GPU budget
of ``thrash.max_gpu_fraction``), whether the plan is within them, the GPUs
admitted per tier and the verifier's verdict.

    python benchmarks/bench_thrash_tick.py --out benchmarks/results/bench_thrash_tick.json
    python benchmarks/bench_thrash_tick.py --nodes 1024 --pending 500   # quick look
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def one(data: dict, time_limit: float, label: str) -> dict:
    from models import load_snapshot
    from planner import plan
    from planner.checks.verify import verify
    from planner.core.problem import build_problem

    snap = load_snapshot(data)
    t0 = time.perf_counter()
    p = plan(snap, time_limit_s=time_limit)
    wall = time.perf_counter() - t0
    tiers = {j.id: j.tier for j in snap.jobs}
    jobs = snap.job_map()
    th = snap.policy.thrash
    exempt = [e for e in p.evictions
              if th is not None and th.exempt_by(tiers[j] for j in e.preemptors)]
    problem = build_problem(snap)
    tb = problem.thrash
    out = {
        "label": label, "wall_s": round(wall, 3), "status": p.status,
        "solver": p.solver.status, "evictions": len(p.evictions),
        "exempt": len(exempt), "not_exempt": len(p.evictions) - len(exempt),
        "evicted_gpus": sum(jobs[e.job].total_gpus for e in p.evictions),
        "running": sum(1 for j in snap.jobs if j.state == "running"),
        "admitted_gpus": p.objective.admitted_gpus,
        "violations": [str(v) for v in verify(snap, p)],
    }
    if tb is not None:
        out.update(budget=tb.limit, recent=tb.recent, gpu_budget=tb.gpu_limit,
                   within=(out["not_exempt"] == 0 or (out["evictions"] <= tb.left
                                                      and out["evicted_gpus"] <= tb.gpus_left)),
                   share_of_running=round(len(p.evictions) / max(1, out["running"]), 4))
    else:
        out["share_of_running"] = round(len(p.evictions) / max(1, out["running"]), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    from planner.sim.generate import generate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=12_500)
    ap.add_argument("--pending", type=int, default=5_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limits", default="1,5", help="comma-separated planner time limits")
    ap.add_argument("--out", help="write the results JSON here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_planner import machine

    at_start = machine()  # (the machine as the runs start: its load average then)
    data = generate(nodes=args.nodes, pending=args.pending, seed=args.seed)
    off = json.loads(json.dumps(data))
    off.setdefault("policy", {})["thrash"] = None
    runs = []
    for limit in (float(x) for x in args.time_limits.split(",")):
        for label, d in (("default policy", data), ("thrash: null", off)):
            r = one(d, limit, label)
            r["time_limit_s"] = limit
            runs.append(r)
            print(json.dumps(r), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True, check=False).stdout.strip()
    doc = {"benchmark": "bench_thrash_tick", "date": datetime.now(UTC).isoformat(timespec="seconds"),
           "commit": commit, "machine": at_start, "nodes": args.nodes, "pending": args.pending,
           "seed": args.seed, "command": " ".join(["python", "benchmarks/bench_thrash_tick.py",
                                                   *(argv or sys.argv[1:])]),
           "runs": runs}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
