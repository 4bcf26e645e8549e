"""Benchmark: ``preempt-planner tune`` on the same space locally and on a two-node Ray
cluster: wall time, trials and simulations per minute.

The search is the worked example of docs/tuning.md: the space
``examples/tune-philly-space.yaml`` (9 policies), the Philly trace on
``tests/data/sim/cluster-1024.yaml``, the windows ``--windows`` (1 day each, with the
carry-over warm start) at ``--loads``, seed 0, cpsat at 1 s per tick. It runs twice,
each time with an empty cache (so every simulation runs): first in local worker
processes (``--jobs``), then through ``--ray`` on a cluster of two ``ray start``
nodes of one CPU each, started on this machine (tests/ray_cluster.py) and stopped
afterwards. On one 2-core machine both have the same two cores: the difference is
what Ray costs (task dispatch, shipping the trace, workers' imports), not a speed-up;
on real nodes the Ray run scales with the cluster's CPUs.

    python benchmarks/bench_tune.py --out benchmarks/results/bench_tune.json \\
        --keep /tmp/tune-philly          # the local run's report, front and policy
    python benchmarks/bench_tune.py --windows 2017-10-04 --no-ray     # a quick look
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def tune_command(args: argparse.Namespace, out: Path, ray: str | None) -> list[str]:
    cmd = [sys.executable, str(REPO / "cli.py"), "tune", "--cluster", args.cluster,
           "--trace", args.trace, "--space", args.space, "--windows", args.windows,
           "--days", str(args.days), "--carry-over", "--loads", args.loads, "--seeds",
           args.seeds, "--planner", args.planner, "--time-limit", str(args.time_limit),
           "--out", str(out), "-o", "json", "--quiet", *args.extra]
    return [*cmd, "--ray", ray] if ray else [*cmd, "--jobs", str(args.jobs)]


def run_once(args: argparse.Namespace, where: str, out: Path, ray: str | None,
             env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = tune_command(args, out, ray)
    print(f"{where}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{where}: tune failed ({r.returncode}):\n{r.stderr[-3000:]}")
    rec = json.loads(r.stdout)
    trials = [t for t in rec["trials"] if t["state"] != "failed"]
    sims = rec["simulations"]["run"]
    summary = {
        "where": rec["settings"]["where"], "wall_s": round(wall, 1),
        "search_wall_s": round(rec["wall_s"], 1), "trials": len(trials),
        "pruned": sum(t["state"] == "pruned" for t in trials), "simulations": sims,
        "trials_per_minute": round(60 * len(trials) / wall, 2),
        "simulations_per_minute": round(60 * sims / wall, 2),
        "front": rec["front"],
        "chosen": {k: v for k, v in (rec["chosen"] or {}).items() if k != "policy"},
    }
    print(f"{where}: {wall:.0f} s, {summary['trials_per_minute']} trials/min, "
          f"{summary['simulations_per_minute']} simulations/min", file=sys.stderr, flush=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="results file (JSON)")
    ap.add_argument("--keep", help="copy the local run's output folder here")
    ap.add_argument("--cluster", default=str(REPO / "tests" / "data" / "sim" / "cluster-1024.yaml"))
    ap.add_argument("--trace", default="philly-2017-09-10.csv")
    ap.add_argument("--space", default=str(REPO / "examples" / "tune-philly-space.yaml"))
    ap.add_argument("--windows", default="2017-10-04,2017-10-11")
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--loads", default="2")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--planner", default="cpsat")
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--jobs", type=int, default=2, help="local processes (default 2)")
    ap.add_argument("--no-ray", action="store_true", help="the local run only")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="more tune options (last)")
    args = ap.parse_args(argv)
    from bench_planner import machine

    result: dict[str, Any] = {"machine": machine(), "command": " ".join(["python", *sys.argv]),
                              "tune": " ".join(tune_command(args, Path("OUT"), None)[1:])}
    work = Path(tempfile.mkdtemp(prefix="bench-tune-"))
    try:
        result["local"] = run_once(args, "local", work / "local", None)
        if args.keep:
            shutil.rmtree(args.keep, ignore_errors=True)
            shutil.copytree(work / "local", args.keep, ignore=shutil.ignore_patterns("cache"))
        if not args.no_ray:
            sys.path.insert(0, str(REPO / "tests"))
            from ray_cluster import LocalRayCluster

            with LocalRayCluster() as cluster:
                result["ray"] = run_once(args, "ray", work / "ray", cluster.address,
                                         cluster.env)
                result["ray"]["nodes"] = "2 x ray start --num-cpus 1, on 127.0.0.2 and 127.0.0.3"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["machine"]["loadavg_end"] = machine()["loadavg_start"]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
