"""Benchmark: one planning tick from 256 to 12,500 nodes, each plan in a fresh process.

For each size (generated clusters as in ``bench_planner.py``: 8-GPU nodes, 90% of
GPUs held, 25% of running jobs immune, 10% multi-node jobs, seed 0) and each
configuration (CP-SAT at ``--limits``, and the greedy, Kubernetes-style and
Slurm-style planners), ``--runs`` plans, the configurations taken in turn in each
round so that they meet the same machine. Each plan runs in a fresh Python
process, as the command line would: it imports the planner, reads and validates
the snapshot file, and calls ``plan()`` on it. Reported per configuration, median
(min-max) of the runs:

- process wall: from starting the process to the plan written (imports, loading,
  the plan, writing it as JSON), where ``preempt-planner plan`` exits;
- plan wall: ``plan()`` on the loaded snapshot (``solver.wall_s``);
- the floor: what a plan needs besides planning: reading and validating the
  snapshot, building the problem, assembling the plan with its explanations, and
  the verifier (timed around those functions in the process);
- peak memory: the process's maximum resident set, and its forked lanes' (the
  largest), in MB;
- the plan: status, solver status, gap (where the model ran), admitted GPUs per
  tier and eviction cost (the worst run's, lexicographically), and whether it
  verifies; for the Kubernetes- and Slurm-style baselines also their plan after
  ``thrash.exempt_free_first`` ("traded"), which the greedy and CP-SAT planners
  apply and these baselines, keeping the schedulers' own choices, do not.

Usage (from the repository root)::

    python benchmarks/bench_scale.py --out benchmarks/results/bench_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
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

DEFAULT_SIZES = "256:100,1024:500,4096:2000,12500:5000"
GEN: dict[str, Any] = {"gpus_per_node": 8, "occupancy": 0.9, "immune_share": 0.25,
                       "multinode_share": 0.1}


def time_floor_parts() -> dict[str, float]:
    """From here on, the seconds spent in build_problem, assemble and verify (the
    floor's parts besides loading) are added up in the dict returned, under "build",
    "assemble" and "verify"."""
    from planner.checks import assemble as assemble_mod
    from planner.checks import verify as verify_mod
    from planner.core import problem as problem_mod
    from planner.solver import cpsat as cpsat_mod

    spent = {"build": 0.0, "assemble": 0.0, "verify": 0.0}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[name] += time.perf_counter() - t
        return wrapper

    problem_mod.build_problem = timed("build", problem_mod.build_problem)
    assemble_mod.assemble = timed("assemble", assemble_mod.assemble)
    cpsat_mod.assemble = assemble_mod.assemble
    verify_mod.verify = timed("verify", verify_mod.verify)
    return spent


def child(path: str, planner: str, limit: float, started: float) -> dict[str, Any]:
    """One plan in this process, with the floor's parts timed (``--child``);
    ``started``: the parent's ``time.time()`` when it started this process."""
    import resource

    t_start = time.perf_counter()
    from models import load_snapshot
    from planner import plan
    from planner.checks import verify as verify_mod
    from planner.solver.speed import factor

    spent = time_floor_parts()
    if planner == "cpsat":  # as the command line does, before reading the snapshot
        from planner import warm_up

        warm_up()
    t_imported = time.perf_counter()
    snap = load_snapshot(path)
    t_loaded = time.perf_counter()
    p = plan(snap, time_limit_s=limit, planner=planner)
    parts = dict(spent)  # the plan's (the check below is the benchmark's own)
    floor = t_loaded - t_imported + sum(parts.values())
    with tempfile.TemporaryFile("w") as fh:  # the plan written, as the command line does
        fh.write(p.model_dump_json())
    process = time.time() - started  # (a command would exit here: cli.FAST_EXIT)
    errors = verify_mod.verify(snap, p)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lanes = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    key = verify_mod.objective_of(snap, p).key()
    traded = None
    if planner in ("k8s", "slurm"):  # (not timed: the benchmark's own)
        # the plan after thrash.exempt_free_first, which the greedy and CP-SAT
        # planners apply and these baselines, keeping the schedulers' choices, do not
        from planner.core.decision import clean, decision_of, exempt_free_first
        from planner.core.decision import objective_of as decision_objective
        from planner.core.problem import build_problem

        prob = build_problem(snap)
        d, _moved = exempt_free_first(prob, clean(prob, decision_of(prob, p)))
        traded = decision_objective(prob, d)
    return {"process_s": process, "imports_s": t_imported - t_start,
            "load_s": t_loaded - t_imported,
            "plan_s": p.solver.wall_s, "build_s": parts["build"],
            "assemble_s": parts["assemble"], "verify_s": parts["verify"], "floor_s": floor,
            "rss_mb": round(own), "lane_rss_mb": round(lanes), "status": p.status,
            "solver_status": p.solver.status, "gap": p.solver.gap,
            "admitted": p.objective.admitted_gpus,
            "cost": round(p.objective.eviction_cost_gpu_s), "evictions": p.objective.evictions,
            "key": list(key), "valid": not errors,
            "traded": None if traded is None else {
                "admitted": traded.admitted_gpus, "key": list(traded.key())},
            # the speed factor the plan's time estimates used (docs/planner.md, section
            # 3): 1.0 in a process whose measurement fell in a quick moment of a busy
            # machine makes its estimates short
            "speed": factor() if planner == "cpsat" else None, "detail": p.solver.detail}


def one_run(path: Path, planner: str, limit: float) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", str(path), planner, str(limit),
                          repr(time.time())], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{planner} at {limit} s on {path} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def med(k: str) -> list[float]:
        xs = [r[k] for r in runs]
        return [round(statistics.median(xs), 3), round(min(xs), 3), round(max(xs), 3)]

    worst = min(runs, key=lambda r: r["key"])
    return {"process_s": med("process_s"), "plan_s": med("plan_s"), "floor_s": med("floor_s"),
            "load_s": med("load_s"), "build_s": med("build_s"), "assemble_s": med("assemble_s"),
            "verify_s": med("verify_s"), "imports_s": med("imports_s"),
            "rss_mb": max(r["rss_mb"] for r in runs),
            "lane_rss_mb": max(r["lane_rss_mb"] for r in runs),
            "statuses": sorted({f"{r['status']} ({r['solver_status']})" for r in runs}),
            "gaps": [r["gap"] for r in runs], "worst": {k: worst[k] for k in (
                "admitted", "cost", "evictions", "key")},
            "traded": min((r["traded"] for r in runs if r.get("traded")),
                          key=lambda t: t["key"], default=None),
            "valid": all(r["valid"] for r in runs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="NODES:PENDING pairs (default "
                    f"{DEFAULT_SIZES})")
    ap.add_argument("--limits", default="1,5", help="CP-SAT time limits in s (default 1,5)")
    ap.add_argument("--runs", type=int, default=5, help="plans per configuration (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--child", nargs=4, metavar=("SNAPSHOT", "PLANNER", "LIMIT", "STARTED"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        path, planner, limit, started = args.child
        print(json.dumps(child(path, planner, float(limit), float(started))), flush=True)
        os._exit(0)  # (as the command line exits after a plan)

    from benchmarks.bench_planner import compile_sources, machine
    from planner.sim.generate import generate

    compiled = compile_sources()  # (each process imports bytecode, as a user's does)
    configs = [("cpsat", float(x)) for x in args.limits.split(",")] + [
        (p, 1.0) for p in ("greedy", "k8s", "slurm")]
    results: dict[str, Any] = {"machine": {**machine(), "bytecode_compiled_files": compiled},
                               "command": " ".join(sys.argv), "sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in args.sizes.split(","):
            nodes, pending = (int(x) for x in pair.split(":"))
            path = Path(tmp) / f"{nodes}.json"
            path.write_text(json.dumps(generate(nodes=nodes, pending=pending, seed=args.seed,
                                                **GEN)))
            runs: dict[str, list[dict[str, Any]]] = {}
            for r in range(args.runs):
                for planner, limit in configs:
                    name = f"{planner} {limit:g} s" if planner == "cpsat" else planner
                    res = one_run(path, planner, limit)
                    runs.setdefault(name, []).append(res)
                    print(f"{nodes:>6} nodes run {r + 1}: {name:<10} process "
                          f"{res['process_s']:6.2f} s plan {res['plan_s']:6.2f} s floor "
                          f"{res['floor_s']:5.2f} s {res['solver_status']} "
                          f"{res['admitted']} rss {res['rss_mb']} MB", file=sys.stderr,
                          flush=True)
            results["sizes"][str(nodes)] = {"pending": pending, "runs": runs, "summary": {
                k: summary(v) for k, v in runs.items()}}
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    for nodes, res in results["sizes"].items():
        for name, s in res["summary"].items():
            print(f"| {int(nodes):,} / {res['pending']:,} | {name} | {s['process_s'][0]:.2f} | "
                  f"{s['plan_s'][0]:.2f} | {s['floor_s'][0]:.2f} | {s['rss_mb']} "
                  f"({s['lane_rss_mb']}) | {', '.join(s['statuses'])} | "
                  f"{s['worst']['admitted']}"
                  + (f" (traded {s['traded']['admitted']})" if s.get("traded") else "")
                  + f" | {s['worst']['cost']:,} |")


if __name__ == "__main__":
    main()
