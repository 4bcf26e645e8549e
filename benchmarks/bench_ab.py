"""Benchmark: two versions of the planner on the same random clusters (an A/B test).

A change to the heuristics (a new move, a new order) helps some plans and may hurt
others; this script measures both. Each random cluster (seeded generator settings,
sometimes a tight ``grace.max_s`` so that the storage I/O-storm limit binds, and a
time limit that grows with its size) is planned by the code of two checkouts,
``--old`` and ``--new`` (default: this one), ``--runs`` times each, alternating which
goes first. Every plan runs in a fresh Python process with that checkout first on
``sys.path``, after one warm-up plan on a 16-node cluster (imports take about 1 s),
so the two versions never share a process. Plans are compared lexicographically
(``objective_of(...).key()``), run by run.

    git worktree add /tmp/old <commit>
    python benchmarks/bench_ab.py --old /tmp/old --clusters 36 --out ab.json
    python benchmarks/bench_ab.py --old /tmp/old --deterministic --clusters 200 \
        --sizes 64:0.3,128:0.3,256:0.5,512:0.5,1024:1,2048:1 --out ab.json   # a refactor

Plans on 2 cores vary from run to run (how far each step gets depends on the
machine's speed), so a single "worse" may be noise: re-run that cluster (``--only``)
before drawing conclusions. Nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_planner import machine
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

err = Console(stderr=True)

# (nodes, time_limit_s), taken in turn
SIZES = [(128, 0.3), (256, 0.3), (256, 1.0), (512, 0.5), (512, 1.0), (768, 1.0),
         (1024, 1.0), (1536, 2.0), (2048, 2.0)]
# with --budgets: eviction budgets (R13), which bind on such dense clusters
BUDGET_SIZES = [(512, 0.5), (768, 0.5), (1024, 0.5), (1024, 1.0), (1536, 1.0), (1536, 2.0)]
# with --small: clusters of two storage targets or more (more than one LNS
# neighbourhood) whose whole model fits in short budgets, and 256 nodes near the
# budget from which the planner builds the whole model
SMALL_SIZES = [(80, 0.2), (96, 0.2), (96, 0.3), (128, 0.3), (160, 0.3), (192, 0.5),
               (256, 1.5), (256, 2.0)]

# run in a fresh process: CODE first on sys.path, the spec on stdin, one JSON line out
CHILD = """
import json, os, sys, time
sys.path.insert(0, os.environ["CODE"])
from models import load_snapshot
import planner
try:
    from planner.sim.generate import generate
except ImportError:  # a checkout that keeps the generator at planner/generate.py
    from planner.generate import generate
planner.plan(load_snapshot(generate(nodes=16, pending=5, seed=1)), time_limit_s=0.3)
spec = json.loads(sys.stdin.read())
s = generate(**spec["gen"])
if spec["grace"]:
    s["policy"]["grace"] = spec["grace"]
s["policy"].update(spec.get("policy", {}))
snap = load_snapshot(s)
t = time.perf_counter()
p = planner.plan(snap, time_limit_s=spec["time_limit_s"],
                 deterministic=spec.get("deterministic", False))
wall = time.perf_counter() - t
o = p.objective
print(json.dumps({"key": [o.admitted_gpus.get(str(t), 0) for t in (1, 2, 3)]
                  + [o.priority_value, round(o.eviction_cost_gpu_s, 1), o.evictions],
                  "wall_s": round(wall, 3), "status": p.status,
                  "solver_status": p.solver.status, "gap": p.solver.gap}))
"""


def clusters(n: int, seed: int, budgets: bool = False, small: bool = False,
             sizes: list[tuple[int, float]] | None = None) -> list[dict[str, Any]]:
    """``n`` cluster specs: generator settings, grace policy and time limit; with
    ``budgets``, BUDGET_SIZES and an eviction budget each (a count, sometimes a GPU
    fraction too; drawn from a second random stream, so that the clusters without
    them stay those of earlier runs); with ``small``, SMALL_SIZES; ``sizes`` replaces
    the list."""
    r = random.Random(seed)
    rb = random.Random(seed + 1)
    sizes = sizes or (BUDGET_SIZES if budgets else SMALL_SIZES if small else SIZES)
    out = []
    for i in range(n):
        nodes, limit = sizes[i % len(sizes)]
        gen = {"nodes": nodes, "pending": int(nodes * r.uniform(0.25, 0.5)),
               "seed": r.randrange(10**6), "occupancy": r.uniform(0.85, 0.94),
               "immune_share": r.uniform(0.05, 0.3), "multinode_share": r.uniform(0.05, 0.2),
               "pools": r.random() < 0.5, "storage_per_blocks": r.choice([4, 8])}
        grace = r.choice([None, {"max_s": 40, "min_s": 0, "safety": 1},
                          {"max_s": 60, "min_s": 0, "safety": 1}])
        spec = {"id": i, "gen": gen, "grace": grace, "time_limit_s": limit}
        if budgets:
            spec["policy"] = {"max_evictions_per_tick": rb.randrange(5, 60)}
            if rb.random() < 0.25:
                spec["policy"]["max_evicted_gpu_fraction"] = round(rb.uniform(0.005, 0.05), 4)
        out.append(spec)
    return out


def run_one(code: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """One plan of ``spec`` by the checkout at ``code``, in a fresh process."""
    res = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(spec), text=True,
                         capture_output=True, env={**os.environ, "CODE": str(code)}, check=False)
    if res.returncode:
        raise SystemExit(f"the plan of cluster {spec['id']} by {code} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def ranked(old: list[Any], new: list[Any]) -> str:
    """A plan key against another: better, worse or same (the cost is negated)."""
    def k(key: list[Any]) -> tuple:
        return (*key[:4], -key[4], -key[5])
    return "better" if k(new) > k(old) else "worse" if k(new) < k(old) else "same"


def summarise(specs: list[dict[str, Any]], runs: dict[int, dict[str, list]]) -> dict[str, Any]:
    counts = {"better": 0, "worse": 0, "same": 0}
    worse_same_gpus = []  # relative eviction cost of worse plans that admit as much
    gpus = {"gained": 0, "lost": 0}  # admitted GPUs, all tiers, summed over pairs
    for spec in specs:
        r = runs[spec["id"]]
        for o, n in zip(r["old"], r["new"], strict=True):
            c = ranked(o["key"], n["key"])
            counts[c] += 1
            diff = sum(n["key"][:3]) - sum(o["key"][:3])
            gpus["gained" if diff > 0 else "lost"] += abs(diff)
            if c == "worse" and n["key"][:3] == o["key"][:3] and o["key"][4]:
                worse_same_gpus.append(round(n["key"][4] / o["key"][4] - 1, 4))
    # plans with a proven bound (solver.gap reported), and with no bound at all (the
    # whole model and every bound skipped), per side (runs of older code say neither)
    bounded = {side: sum(1 for spec in specs for x in runs[spec["id"]][side]
                         if x.get("gap") is not None) for side in ("old", "new")}
    skipped = {side: sum(1 for spec in specs for x in runs[spec["id"]][side]
                         if x.get("solver_status") == "SKIPPED") for side in ("old", "new")}
    return {**counts, "admitted_gpus": gpus, "worse_same_gpus_cost_rel": worse_same_gpus,
            "with_gap": bounded, "skipped": skipped}


def git_commit(path: Path) -> str:
    res = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False)
    return res.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=Path, required=True, help="checkout of the old code")
    ap.add_argument("--new", type=Path, default=REPO, help="checkout of the new code")
    ap.add_argument("--clusters", type=int, default=36)
    ap.add_argument("--seed", type=int, default=1414)
    ap.add_argument("--runs", type=int, default=1, help="plans per cluster and version")
    ap.add_argument("--budgets", action="store_true",
                    help="clusters of 512-1,536 nodes with eviction budgets (R13)")
    ap.add_argument("--small", action="store_true",
                    help="clusters of 80-256 nodes at budgets where the whole model fits")
    ap.add_argument("--sizes", type=str, default="",
                    help="NODES:TIME_LIMIT_S pairs, comma-separated, taken in turn "
                         "(replaces the built-in list)")
    ap.add_argument("--deterministic", action="store_true",
                    help="plan in deterministic mode (one worker, no clock): the same code "
                         "gives the same plan, so a refactor that keeps the plans shows as "
                         "'same' on every cluster")
    ap.add_argument("--only", type=str, default="", help="cluster ids, comma-separated")
    ap.add_argument("--out", type=str, default="", help="write the results as JSON here")
    args = ap.parse_args(argv)
    for side in (args.old, args.new):
        if not (side / "planner" / "__init__.py").is_file():
            err.print(f"error: --old/--new: {side} is not a checkout of this project")
            return 2
    if args.budgets and args.small:
        err.print("error: --budgets and --small choose different clusters: pass one")
        return 2
    try:
        sizes = [(int(a), float(b)) for a, b in
                 (x.split(":") for x in args.sizes.split(",") if x.strip())]
    except ValueError:
        err.print(f"error: --sizes {args.sizes!r}: give NODES:TIME_LIMIT_S pairs, "
                  "e.g. 64:0.3,2048:2")
        return 2
    specs = clusters(args.clusters, args.seed, args.budgets, args.small, sizes or None)
    for spec in specs:
        spec["deterministic"] = args.deterministic
    if args.only:
        keep = {int(x) for x in args.only.split(",")}
        specs = [s for s in specs if s["id"] in keep]
    runs: dict[int, dict[str, list]] = {s["id"]: {"old": [], "new": []} for s in specs}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, auto_refresh=False) as prog:
        task = prog.add_task("plans", total=2 * args.runs * len(specs))
        for spec in specs:
            for r in range(args.runs):
                order = ("old", "new") if (spec["id"] + r) % 2 == 0 else ("new", "old")
                for side in order:
                    code = args.old if side == "old" else args.new
                    runs[spec["id"]][side].append(run_one(code, spec))
                    prog.update(task, advance=1, refresh=True,
                                description=f"cluster {spec['id']} ({spec['gen']['nodes']} nodes)")
            r = runs[spec["id"]]
            verdicts = [ranked(o["key"], n["key"]) for o, n in zip(r["old"], r["new"], strict=True)]
            err.print(f"{spec['id']:3d} {spec['gen']['nodes']:5d} nodes "
                      f"{spec['time_limit_s']:g} s: {', '.join(verdicts)}; "
                      f"old {r['old'][-1]['key'][:3]} new {r['new'][-1]['key'][:3]}")
    summary = summarise(specs, runs)
    err.print(f"better {summary['better']}, worse {summary['worse']}, same {summary['same']}; "
              f"admitted GPUs gained {summary['admitted_gpus']['gained']}, "
              f"lost {summary['admitted_gpus']['lost']}; worse at the same admissions, "
              f"eviction cost +{summary['worse_same_gpus_cost_rel']}; plans with a gap "
              f"{summary['with_gap']['old']} old, {summary['with_gap']['new']} new; "
              f"SKIPPED {summary['skipped']['old']} old, {summary['skipped']['new']} new")
    result = {"machine": machine(), "command": " ".join(sys.argv),
              "old": {"path": str(args.old), "commit": git_commit(args.old)},
              "new": {"path": str(args.new), "commit": git_commit(args.new)},
              "clusters": specs, "runs": runs, "summary": summary}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        err.print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
