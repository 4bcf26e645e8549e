"""Benchmark: how far from the optimum are the plans? Proven bounds by size.

For generated clusters (bench_scale.py's settings: 8-GPU nodes, 90% of GPUs held,
25% of running jobs immune, 10% multi-node jobs, seed 0), each planner (CP-SAT at
``--limit``, and the greedy, Kubernetes-style and Slurm-style planners) plans the
tick; then the relaxation of planner/solver/bound.py, solved with CP-SAT for up to
``--bound`` seconds on ``--workers`` cores, bounds each plan's objective. Twice: with
the default policy, and with ``thrash.exempt_free_first: false`` (the swap gives
up admissions on purpose, so the gap with it on is partly the swap's price; with
it off the gap is the planner's alone).

Reported per plan: admitted GPUs per tier, the first objective item where the bound
passes the plan (or "optimal": every item reached), the bound there, the gap, and
the bound's time. Timings are not the point here (see bench_scale.py); the plans
are made in a fresh process each (``preempt-planner plan``), as users get them.

Usage (from the repository root)::

    python benchmarks/bench_bound.py --out benchmarks/results/bench_bound.json
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

from benchmarks.bench_scale import GEN

PLANNERS = ("cpsat", "greedy", "k8s", "slurm")


def one(path: Path, planner: str, limit: float, bound_s: float,
        workers: int) -> dict[str, Any]:
    """Plan in a fresh process, as the command line does, then bound the plan."""
    from models import Plan, load_snapshot
    from planner.core.budget import Budget
    from planner.core.decision import decision_of
    from planner.core.problem import build_problem
    from planner.solver.bound import prove

    out = path.with_suffix(f".{planner}.plan.json")
    subprocess.run([sys.executable, str(REPO / "cli.py"), "plan", str(path), "--planner",
                    planner, "--time-limit", str(limit), "--out", str(out), "--quiet"],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    p = Plan.model_validate_json(out.read_text())
    problem = build_problem(load_snapshot(str(path)))
    t = time.perf_counter()
    res = prove(problem, decision_of(problem, p), Budget(bound_s), workers=workers)
    took = time.perf_counter() - t
    last = res.items[-1] if res.items else None
    return {"planner": planner, "status": p.status, "solver_status": p.solver.status,
            "admitted": "/".join(str(p.objective.admitted_gpus.get(t, 0))
                                 for t in ("1", "2", "3")),
            "cost": p.objective.eviction_cost_gpu_s, "evictions": p.objective.evictions,
            "items": res.items, "proven": res.proven, "gap": res.gap,
            "open_item": None if res.proven or last is None else last[0],
            "bound": None if last is None else last[2],
            "bound_status": None if last is None else last[3], "bound_s": round(took, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="256:100,1024:500,4096:2000",
                    help="nodes:pending pairs (default 256:100,1024:500,4096:2000)")
    ap.add_argument("--limit", type=float, default=1.0, help="CP-SAT time limit (default 1)")
    ap.add_argument("--bound", type=float, default=30.0,
                    help="seconds for each plan's bound (default 30)")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers for the bound")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the results as JSON")
    args = ap.parse_args()

    from benchmarks.bench_planner import machine
    from planner.sim.generate import generate

    results: dict[str, Any] = {"machine": machine(), "command": " ".join(sys.argv),
                               "sizes": {}}
    tmp = Path(tempfile.mkdtemp(prefix="bench_bound."))
    for pair in args.sizes.split(","):
        nodes, pending = (int(x) for x in pair.split(":"))
        snap = generate(nodes=nodes, pending=pending, seed=args.seed, **GEN)
        plain = copy.deepcopy(snap)
        plain["policy"].setdefault("thrash", {})["exempt_free_first"] = False
        rows = []
        for policy, s in (("default", snap), ("exempt_free_first off", plain)):
            path = tmp / f"{nodes}-{'plain' if s is plain else 'default'}.json"
            path.write_text(json.dumps(s))
            for name in PLANNERS:
                row = {"policy": policy, **one(path, name, args.limit, args.bound, args.workers)}
                rows.append(row)
                print(f"{nodes:>6} nodes {policy:<22} {name:<7} {row['admitted']:<16} "
                      f"{'optimal' if row['proven'] else row['open_item']} bound "
                      f"{row['bound']} gap {row['gap']} ({row['bound_status']}, "
                      f"{row['bound_s']} s)", file=sys.stderr, flush=True)
        results["sizes"][str(nodes)] = {"pending": pending, "rows": rows}
    shutil.rmtree(tmp, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
