"""Benchmark: the floor of one plan, part by part, in one process.

The floor is what a plan needs besides planning (``solver.detail`` reports it where
it is a good part of the time limit). For each size (the ``bench_scale.py``
clusters: 8-GPU nodes, 90% of GPUs held, 25% of running jobs immune, 10%
multi-node jobs, seed 0), ``--repeat`` times, median (min-max):

- ``parse``: the snapshot file's JSON text parsed alone, by pydantic-core's parser
  (what ``load_snapshot`` uses) and by ``json.loads``: what no loader of this
  format can go below;
- ``load``: ``load_snapshot`` of the file (parse and validation into the contract's
  objects);
- ``build``: ``build_problem`` of the loaded snapshot, and the share of it spent on
  the running jobs (their GPUs, flush, storm cap and what protects each);
- ``plan``: ``plan()`` of the loaded snapshot at ``--limit`` (CP-SAT), with its
  floor: building the problem, assembling the plan, the verifier and freeing what
  the tick built, timed around those functions;
- ``file``: ``plan()`` of the file at ``--limit``, with its floor: the same, and
  reading the file inside the call (the time limit counts from the call, so the
  floor is above a limit of 1 s at 12,500 nodes, and the promise is the floor and
  0.1 s);
- the running jobs and the plan's admitted GPUs per tier.

The cyclic garbage collector is paused around each part as ``plan()`` and
``load_snapshot`` pause it. Usage (from the repository root)::

    python benchmarks/bench_floor.py --out benchmarks/results/bench_floor.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

DEFAULT_SIZES = "4096:2000,12500:5000"


def _timed(fn: Any) -> float:
    gc.disable()
    try:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    finally:
        gc.enable()


def one_size(path: Path, limit: float, repeat: int) -> dict[str, Any]:
    import pydantic_core

    from benchmarks.bench_scale import time_floor_parts
    from models import load_snapshot
    from planner import plan
    from planner.core import problem as problem_mod

    text = path.read_text()
    real_build = problem_mod.build_problem
    spent = time_floor_parts()
    rows: dict[str, list[float]] = {k: [] for k in (
        "parse_s", "parse_json_loads_s", "load_s", "build_s", "build_running_s", "plan_s",
        "plan_floor_s", "plan_build_s", "plan_assemble_s", "plan_verify_s", "file_plan_s",
        "file_floor_s", "file_load_s", "file_over_floor_s")}
    import planner

    real_load = planner.load_snapshot

    def load_timed(*a: Any, **kw: Any) -> Any:  # (the file read inside plan())
        t = time.perf_counter()
        try:
            return real_load(*a, **kw)
        finally:
            spent["load"] = spent.get("load", 0.0) + time.perf_counter() - t

    planner.load_snapshot = load_timed  # type: ignore[attr-defined]
    admitted: list[dict[str, int]] = []
    file_admitted: list[dict[str, int]] = []
    running = 0
    for _ in range(repeat):
        rows["parse_s"].append(_timed(lambda: pydantic_core.from_json(text,
                                                                      cache_strings="keys")))
        rows["parse_json_loads_s"].append(_timed(lambda: json.loads(text)))
        t = time.perf_counter()
        snap = load_snapshot(path)  # (pauses the collector itself)
        rows["load_s"].append(time.perf_counter() - t)
        running = len(snap.running())
        rows["build_s"].append(_timed(lambda snap=snap: real_build(snap)))
        rows["build_running_s"].append(_running_share(snap))
        for k in spent:
            spent[k] = 0.0
        p = plan(snap, time_limit_s=limit)
        # the floor inside the call: what solver.detail counts (the plan's wall less
        # the planning between the problem and the checks) is not exposed, so its
        # timed parts and the freeing the detail reports are added up
        freeing = _freeing_s(p.solver.detail or "")
        rows["plan_s"].append(p.solver.wall_s)
        rows["plan_build_s"].append(spent["build"])
        rows["plan_assemble_s"].append(spent["assemble"])
        rows["plan_verify_s"].append(spent["verify"])
        rows["plan_floor_s"].append(sum(spent.values()) + freeing)
        admitted.append(p.objective.admitted_gpus)
        del snap, p
        for k in spent:
            spent[k] = 0.0
        p = plan(path, time_limit_s=limit)
        floor = sum(spent.values()) + _freeing_s(p.solver.detail or "")
        rows["file_plan_s"].append(p.solver.wall_s)
        rows["file_load_s"].append(spent["load"])
        rows["file_floor_s"].append(floor)
        rows["file_over_floor_s"].append(p.solver.wall_s - floor)
        file_admitted.append(p.objective.admitted_gpus)
        del p
    return {"running_jobs": running, "time_limit": limit, "admitted": admitted,
            "file_admitted": file_admitted,
            **{k: [round(statistics.median(v), 3), round(min(v), 3), round(max(v), 3)]
               for k, v in rows.items()}}


def _running_share(snap: Any) -> float:
    """build_problem's work on the running jobs alone (_static and _victim for each, as
    the build does them, in canonical order), timed with the collector paused."""
    from planner.core import problem as problem_mod

    p = problem_mod.build_problem(snap)
    tick = problem_mod._Tick.of(snap.policy, snap.now, p.nodes)

    def work() -> None:
        for j in sorted(snap.running(), key=lambda j: j.id):
            st = problem_mod._static(snap.policy, j, tick, p.node_index, p.nodes)
            problem_mod._victim(snap.policy, snap.now, j, st, tick)

    return _timed(work)


def _freeing_s(detail: str) -> float:
    """The seconds solver.detail says freeing what the tick built took (0 if none)."""
    import re

    m = re.search(r"([0-9.]+) s freeing what the tick built", detail) or re.search(
        r"freeing what the tick built \(([0-9.]+) s\)", detail)
    return float(m.group(1)) if m else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="NODES:PENDING pairs (default "
                    f"{DEFAULT_SIZES})")
    ap.add_argument("--limit", type=float, default=1.0, help="CP-SAT time limit (default 1)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per size (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()

    from benchmarks.bench_planner import machine
    from benchmarks.bench_scale import GEN
    from planner import warm_up
    from planner.sim.generate import generate

    warm_up()
    results: dict[str, Any] = {"machine": machine(), "command": " ".join(sys.argv),
                               "sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in args.sizes.split(","):
            nodes, pending = (int(x) for x in pair.split(":"))
            path = Path(tmp) / f"{nodes}.json"
            path.write_text(json.dumps(generate(nodes=nodes, pending=pending, seed=args.seed,
                                                **GEN)))
            res = one_size(path, args.limit, args.repeat)
            res["pending"] = pending
            res["file_mb"] = round(path.stat().st_size / 1e6, 1)
            results["sizes"][str(nodes)] = res
            print(f"{nodes:,} nodes: " + ", ".join(
                f"{k} {v[0]:.3f}" for k, v in res.items() if k.endswith("_s")),
                file=sys.stderr, flush=True)
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print("| nodes / pending | running jobs | parse s (json.loads) | load s | build s "
          "(running jobs) | plan at 1 s | its floor (build, assembly, verifier) "
          "| plan of the file at 1 s | its floor (loading) | over the floor |")
    for nodes, r in results["sizes"].items():
        print(f"| {int(nodes):,} / {r['pending']:,} | {r['running_jobs']:,} | "
              f"{r['parse_s'][0]:.2f} ({r['parse_json_loads_s'][0]:.2f}) | "
              f"{r['load_s'][0]:.2f} | {r['build_s'][0]:.2f} ({r['build_running_s'][0]:.2f}) | "
              f"{r['plan_s'][0]:.2f} | {r['plan_floor_s'][0]:.2f} ({r['plan_build_s'][0]:.2f}, "
              f"{r['plan_assemble_s'][0]:.2f}, {r['plan_verify_s'][0]:.2f}) | "
              f"{r['file_plan_s'][0]:.2f} | {r['file_floor_s'][0]:.2f} "
              f"({r['file_load_s'][0]:.2f}) | {r['file_over_floor_s'][0]:.2f} "
              f"({r['file_over_floor_s'][1]:.2f}-{r['file_over_floor_s'][2]:.2f}) |")


if __name__ == "__main__":
    main()
