"""Benchmark: the planners on several weeks of the Philly trace at 1x, 2x and 3x load.

Every run simulates ``--days`` days on ``tests/data/sim/cluster-1024.yaml`` (128
nodes x 8 GPUs, 4 x 20 GB/s NFS) with the default policy, 60 s ticks, the
carry-over warm start, a 1 s planner time limit, from each ``--weeks`` start; the
load L puts L x ``--days`` days of trace arrivals into the simulated days
(``--time-scale 1/L``). Every planner of a (week, load, seed) sees the same
trace, the same synthesized fields and the same seed.

Runs go to worker processes (``--jobs``); each run's metrics are written to
``OUT/<week>-<load>x-s<seed>-<planner>.json`` as soon as it ends, and a run whose
file exists is not run again (an interrupted matrix resumes). ``--report`` prints
one Markdown table per load from the files, with the checks of docs/simulation.md.

    python benchmarks/sim_matrix.py --out sim-matrix               # the whole matrix
    python benchmarks/sim_matrix.py --out sim-matrix --report      # the tables
    python benchmarks/sim_matrix.py --out pilot --days 1 --loads 2 --seeds 0 \\
        --planners cpsat,naive --weeks 2017-10-04

Another trace and cluster: ``--trace``, ``--cluster`` and ``--load-unit`` (the
compression of load 1: load L runs at ``--time-scale 1/(unit x L)``); the held-out
Alibaba openb matrix of docs/simulation.md:

    python benchmarks/sim_matrix.py --out openb --trace openb_pod_list_default.csv \\
        --cluster tests/data/sim/cluster-256.yaml --load-unit 15 --weeks 2023-10-19 \\
        --days 1.2 --tag openb
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

CLUSTER = REPO / "tests" / "data" / "sim" / "cluster-1024.yaml"
TRACE = "philly-2017-09-10.csv"  # found in ../shared/traces
PLANNERS = ("cpsat", "greedy", "slurm", "k8s", "naive")


def _name(week: str, load: float, seed: int, planner: str, tag: str = "") -> str:
    return f"{week}-{load:g}x-s{seed}-{planner}{'-' + tag if tag else ''}"


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """One simulation (in a worker process); its metrics, with the run's settings."""
    from planner.sim.metrics import compute_metrics
    from planner.sim.runner import RunSpec, parse_time, prepare

    cluster = str(REPO / job["cluster"]) if "cluster" in job else str(CLUSTER)
    spec = RunSpec(cluster=cluster, trace=job.get("trace", TRACE), carry_over=True,
                   time_scale=1.0 / (job.get("load_unit", 1.0) * job["load"]),
                   policy=job.get("policy"),
                   policy_sets=[tuple(x) for x in job.get("sets", [])],
                   tier_rule=job.get("tier_rule"),
                   config={"planner": job["planner"], "tick_s": 60.0, "days": job["days"],
                           "start": parse_time(job["week"]), "seed": job["seed"],
                           "time_limit_s": job["time_limit"], "workers": job["workers"],
                           "deterministic": job.get("deterministic", False),
                           "label": job["planner"]})
    t0 = time.perf_counter()
    res = prepare(spec).run()
    m = compute_metrics(res)
    m["run"] = {**job, "wall_s": time.perf_counter() - t0, "commit": _commit()}
    return m


def _commit() -> str:
    import subprocess

    res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                         capture_output=True, text=True, check=False)
    return res.stdout.strip() or "unknown"


KEPT = ("thrash_windows", "thrash_by_preemptor_tier", "thrash_repeats", "wasted_gpu_h",
        "evictions", "evictions_by_tier", "eviction_rate", "queue_delay_s", "utilization",
        "goodput", "completed", "jobs", "cascades", "failed_flushes", "wait_by_reason_h",
        "planner_calls", "wall_s")


def save(out: Path, dest: Path, weeks: list[str], loads: list[float], seeds: list[int],
         planners: list[str], tag: str = "") -> None:
    """The main metrics of every run found, with the machine and each run's settings,
    as one JSON file."""
    from bench_planner import machine

    runs = []
    for load in loads:
        for week in weeks:
            for seed in seeds:
                for planner in planners:
                    f = out / f"{_name(week, load, seed, planner, tag)}.json"
                    if f.exists():
                        m = json.loads(f.read_text())
                        m["run"].setdefault("commit", _commit())
                        runs.append({"run": m["run"], **{k: m[k] for k in KEPT if k in m}})
    doc = {"benchmark": "sim_matrix", "machine": machine(),
           "command": " ".join(["python", "benchmarks/sim_matrix.py", *sys.argv[1:]]),
           "runs": runs}
    dest.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder of per-run metrics files")
    ap.add_argument("--weeks", default="2017-10-04,2017-09-25",
                    help="comma-separated start days (UTC)")
    ap.add_argument("--loads", default="1,2,3", help="comma-separated load factors")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--planners", default=",".join(PLANNERS))
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--deterministic", action="store_true",
                    help="the planners in deterministic mode (simulate --deterministic): "
                         "each tick's plan the same in every run, its time limit counted "
                         "in CP-SAT's deterministic time")
    ap.add_argument("--workers", type=int, default=1,
                    help="cores per planner call (default 1: --jobs runs share the machine)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="policy change for every run (as simulate --set)")
    ap.add_argument("--tag", default="", help="suffix of the files (a policy variant)")
    ap.add_argument("--tier-rule", help="as simulate --tier-rule")
    ap.add_argument("--trace", default=TRACE,
                    help=f"trace file or a name in ../shared/traces (default {TRACE}; "
                         "with another trace or cluster give a --tag: the files are "
                         "named by week, load, seed and planner)")
    ap.add_argument("--cluster", default=str(CLUSTER.relative_to(REPO)),
                    help="cluster file (default the 1,024-GPU tests/data/sim/cluster-1024.yaml)")
    ap.add_argument("--load-unit", type=float, default=1.0,
                    help="the time compression of load 1 (default 1: the trace's own pace); "
                         "load L runs at --time-scale 1/(unit x L)")
    ap.add_argument("--report", action="store_true", help="print the tables and stop")
    ap.add_argument("--save", metavar="FILE",
                    help="with --report: also write every run's main metrics to FILE "
                         "(benchmarks/results/sim_matrix.json)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    weeks = [w.strip() for w in args.weeks.split(",") if w.strip()]
    loads = [float(x) for x in args.loads.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    planners = [p.strip() for p in args.planners.split(",") if p.strip()]
    if args.report:
        print(report(out, weeks, loads, seeds, planners, args.tag))
        if args.save:
            save(out, Path(args.save), weeks, loads, seeds, planners, args.tag)
        return 0
    from planner.sim.whatif import parse_assignment

    sets = [list(parse_assignment(s)) for s in args.sets]
    out.mkdir(parents=True, exist_ok=True)
    todo = []
    # the slow runs first (high load, cpsat), so that the pool ends evenly
    for load in sorted(loads, reverse=True):
        for week in weeks:
            for seed in seeds:
                for planner in planners:
                    name = _name(week, load, seed, planner, args.tag)
                    if not (out / f"{name}.json").exists():
                        todo.append({"week": week, "load": load, "seed": seed,
                                     "planner": planner, "days": args.days,
                                     "time_limit": args.time_limit, "workers": args.workers,
                                     "deterministic": args.deterministic,
                                     "sets": sets, "tier_rule": args.tier_rule, "name": name,
                                     "trace": args.trace,
                                     "cluster": args.cluster,
                                     "load_unit": args.load_unit})
    print(f"{len(todo)} run(s) to do in {args.jobs} process(es)", file=sys.stderr, flush=True)
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        running = {pool.submit(run_one, job): job for job in todo}
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                job = running.pop(f)
                try:
                    m = f.result()
                except Exception as exc:  # noqa: BLE001 (report it and go on with the others)
                    print(f"FAILED {job['name']}: {exc!r}", file=sys.stderr, flush=True)
                    continue
                tmp = out / f".{job['name']}.tmp"
                tmp.write_text(json.dumps(m, indent=1, sort_keys=True))
                os.replace(tmp, out / f"{job['name']}.json")
                print(f"{time.time() - t0:7.0f} s  {job['name']}: {m['run']['wall_s']:.0f} s, "
                      f"{m['thrash_windows']} alerts, {m['wasted_gpu_h']['total']:.0f} GPU-h "
                      f"wasted, {m['evictions']} evictions", file=sys.stderr, flush=True)
    return 0


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


COLUMNS = [
    ("alerts", lambda m: f"{m['thrash_windows']}"),
    ("alert evictions by tier", lambda m: ", ".join(
        f"t{k} {v}" for k, v in m.get("thrash_by_preemptor_tier", {}).items()) or "-"),
    ("wasted GPU-h", lambda m: f"{m['wasted_gpu_h']['total']:,.1f}"),
    ("evictions", lambda m: f"{m['evictions']:,}"),
    ("max rate (1 h)", lambda m: f"{100 * m['eviction_rate']['max']:.1f}%"),
    ("t1 p95", lambda m: _dur(m["queue_delay_s"]["1"]["p95"])),
    ("t1 max", lambda m: _dur(m["queue_delay_s"]["1"]["max"])),
    ("t2 p95", lambda m: _dur(m["queue_delay_s"]["2"]["p95"])),
    ("t3 p95", lambda m: _dur(m["queue_delay_s"]["3"]["p95"])),
    ("util", lambda m: f"{100 * m['utilization']:.1f}%"),
    ("wall", lambda m: _dur(m["run"]["wall_s"])),
]


def report(out: Path, weeks: list[str], loads: list[float], seeds: list[int],
           planners: list[str], tag: str = "") -> str:
    """One Markdown table per load (a row per week, seed and planner), then the
    checks against naive and greedy of every (week, seed)."""
    lines = []
    for load in loads:
        runs = []
        for week in weeks:
            for seed in seeds:
                for planner in planners:
                    f = out / f"{_name(week, load, seed, planner, tag)}.json"
                    if f.exists():
                        runs.append(json.loads(f.read_text()))
        if not runs:
            continue
        lines += [f"### {load:g}x load", "",
                  "| week | seed | planner | " + " | ".join(c for c, _ in COLUMNS) + " |",
                  "| --- | ---: | --- |" + " ---: |" * len(COLUMNS)]
        for m in runs:
            r = m["run"]
            lines.append(f"| {r['week']} | {r['seed']} | {r['planner']} | "
                         + " | ".join(get(m) for _, get in COLUMNS) + " |")
        lines += ["", *checks(runs, load), ""]
    return "\n".join(lines)


def checks(runs: list[dict[str, Any]], load: float) -> list[str]:
    """The expectations of docs/simulation.md for every planner but naive, per run."""
    by = {(m["run"]["week"], m["run"]["seed"], m["run"]["planner"]): m for m in runs}
    out = []
    for (week, seed, planner), m in sorted(by.items()):
        naive, greedy = by.get((week, seed, "naive")), by.get((week, seed, "greedy"))
        if planner == "naive" or naive is None:
            continue
        q1, n1 = m["queue_delay_s"]["1"], naive["queue_delay_s"]["1"]
        q2, n2 = m["queue_delay_s"]["2"], naive["queue_delay_s"]["2"]
        limit = 0 if load < 3 else 0.1 * naive["thrash_windows"]
        got = {
            "alerts": m["thrash_windows"] <= limit,
            "waste vs naive": m["wasted_gpu_h"]["total"] <= 0.5 * naive["wasted_gpu_h"]["total"],
            "waste vs greedy": (greedy is None or planner != "cpsat"
                                or m["wasted_gpu_h"]["total"] <= greedy["wasted_gpu_h"]["total"]),
            "t1 p95": (q1["p95"] or 0) <= 1.1 * (n1["p95"] or 0) + 1e-9,
            "t1 max": (q1["max"] or 0) <= 2 * (n1["max"] or 0) + 1e-9,
        }
        missed = [k for k, ok in got.items() if not ok]
        ratio = (q2["p95"] or 0) / max(1.0, n2["p95"] or 0)
        out.append(f"- {week} s{seed} {planner}: "
                   + ("all met" if not missed else "missed " + ", ".join(missed))
                   + f" (alerts {m['thrash_windows']} vs naive {naive['thrash_windows']}; "
                     f"waste {m['wasted_gpu_h']['total']:.0f} vs naive "
                     f"{naive['wasted_gpu_h']['total']:.0f}; tier-2 p95 {ratio:.2f}x naive's"
                   + (f"; {against(m, greedy)}" if "waste vs greedy" in missed
                      and greedy is not None else "") + ")")
    return out


def against(m: dict[str, Any], greedy: dict[str, Any]) -> str:
    """What a run that wastes more than greedy's got for it: the GPU-hours more, the
    jobs completed more, and its tier-2 and tier-3 p95 queueing delays as a share of
    greedy's."""
    def share(tier: str) -> str:
        mine, theirs = m["queue_delay_s"][tier]["p95"], greedy["queue_delay_s"][tier]["p95"]
        return "-" if mine is None or not theirs else f"{mine / theirs:.2f}x"
    more = m["wasted_gpu_h"]["total"] - greedy["wasted_gpu_h"]["total"]
    return (f"against greedy: {more:.2f} GPU-h more wasted, "
            f"{m['completed'] - greedy['completed']:+d} jobs completed, tier-2 p95 "
            f"{share('2')} and tier-3 p95 {share('3')} greedy's")


if __name__ == "__main__":
    raise SystemExit(main())
