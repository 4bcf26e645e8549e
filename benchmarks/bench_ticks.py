"""Benchmark: steady ticks, the latency of each tick over a recorded sequence of snapshots.

A scheduling loop (``slurm run``, a caller of the service, the simulator) plans one
tick after another in one process, each snapshot a little different from the last.
This benchmark records such a sequence and plans every snapshot of it as that loop
would: one process, the planner warmed up (``planner.warm_up()``), each snapshot
read from its file and planned with ``--time-limit``.

- ``--generate NODES:PENDING`` records the sequence: a generated cluster (as in
  ``bench_scale.py``: 8-GPU nodes, 90% of GPUs held, 25% of running jobs immune,
  10% multi-node jobs, seed 0) is planned, the plan carried out (victims leave and
  are requeued with ``last_preempted_at``, and counted in ``recent_evictions``;
  placed jobs start after their ``start_after_s``), ``now`` moves on by ``--tick``
  seconds, ``--completions`` running jobs end and ``--arrivals`` jobs arrive (copies
  of the shapes of pending jobs, drawn with ``--seed``), and the next snapshot is
  planned: ``--ticks`` ticks, written to ``OUT/tick-000001.json`` and so on.
- ``--replay DIR`` plans the ``tick-*.json`` of DIR again (a sequence written by
  ``--generate``, or by ``simulate --dump-ticks``).
- ``--versus-whole`` plans each tick a second time with CP-SAT's strategies
  searching the whole tick, without taking out first what needs no search
  (planner/core/reduce.py): the time and the admissions that reduction makes.

Reported per tick: reading the file, the plan wall (``solver.wall_s``), the solver
status, admitted GPUs per tier, evictions; then the median steady tick (every tick
after the first) against the cold one: the first snapshot planned in a fresh
process (imports and reading included), as ``preempt-planner plan`` would.

    python benchmarks/bench_ticks.py --generate 4096:2000 --ticks 8 --out ticks-4096 \\
        --versus-whole --save benchmarks/results/bench_ticks.json
    python benchmarks/bench_ticks.py --replay ticks-4096
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

GEN: dict[str, Any] = {"gpus_per_node": 8, "occupancy": 0.9, "immune_share": 0.25,
                       "multinode_share": 0.1}


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def carry_out(doc: dict[str, Any], plan: dict[str, Any], *, tick_s: float,
              rng: np.random.Generator, arrivals: int, completions: int,
              seq: int) -> dict[str, Any]:
    """The next tick's snapshot: ``doc`` with ``plan`` carried out, ``tick_s`` later,
    ``completions`` running jobs ended and ``arrivals`` new pending jobs (copies of
    pending jobs' shapes; ids ``arrival-<seq>-<k>``). ``doc`` is left as it was."""
    doc = json.loads(json.dumps(doc))
    now = _time(doc["now"])
    nxt = now + timedelta(seconds=tick_s)
    jobs = {j["id"]: j for j in doc["jobs"]}
    recent = doc.setdefault("recent_evictions", [])
    for e in plan["evictions"]:
        j = jobs[e["job"]]
        gpus = sum(len(p["gpus"]) for p in j.get("placement") or [])
        for key in ("placement", "started_at", "expected_end_at"):
            j.pop(key, None)
        j["state"] = "pending"
        j["preemptions"] = j.get("preemptions", 0) + 1
        j["last_preempted_at"] = _iso(now)
        recent.append({"job": e["job"], "at": _iso(now), "gpus": gpus})
    for p in plan["placements"]:
        j = jobs[p["job"]]
        j["state"] = "running"
        j["placement"] = p["placement"]
        start = now + timedelta(seconds=min(float(p.get("start_after_s") or 0.0), tick_s))
        j["started_at"] = _iso(start)
    running = sorted(j["id"] for j in doc["jobs"] if j["state"] == "running")
    placed = {p["job"] for p in plan["placements"]}
    ended = set(rng.choice([r for r in running if r not in placed],
                           size=min(completions, len(running) - len(placed)),
                           replace=False).tolist()) if completions else set()
    doc["jobs"] = [j for j in doc["jobs"] if j["id"] not in ended]
    pending = sorted((j for j in doc["jobs"] if j["state"] == "pending"), key=lambda j: j["id"])
    for k in range(arrivals if pending else 0):
        src = pending[int(rng.integers(len(pending)))]
        new = {key: v for key, v in src.items()
               if key not in ("preemptions", "last_preempted_at")}
        new["id"] = f"arrival-{seq}-{k}"
        new["submitted_at"] = _iso(nxt)
        doc["jobs"].append(new)
    window = float(((doc.get("policy") or {}).get("thrash") or {}).get("window_s", 3600))
    doc["recent_evictions"] = [e for e in recent
                               if (nxt - _time(e["at"])).total_seconds() <= window]
    doc["now"] = _iso(nxt)
    return doc


def record(nodes: int, pending: int, ticks: int, out: Path, *, tick_s: float, limit: float,
           arrivals: int, completions: int, seed: int, versus: bool = False
           ) -> list[dict[str, Any]]:
    """Write and plan ``ticks`` snapshots (see the module doc); one row per tick."""
    from planner.sim.generate import generate

    out.mkdir(parents=True, exist_ok=True)
    doc = generate(nodes=nodes, pending=pending, seed=0, **GEN)
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(1, ticks + 1):
        path = out / f"tick-{k:06d}.json"
        path.write_text(json.dumps(doc))
        row, plan = plan_file(path, limit)
        rows.append(row)
        print(_line(row), file=sys.stderr)
        if versus:
            row["whole"] = plan_file(path, limit, whole=True)[0]
            print(_line(row["whole"]), file=sys.stderr)
        doc = carry_out(doc, plan, tick_s=tick_s, rng=rng, arrivals=arrivals,
                        completions=completions, seq=k)
    return rows


def plan_file(path: Path, limit: float, *, whole: bool = False
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read and plan one snapshot file in this process: its row and the plan.
    ``whole``: CP-SAT's strategies search the whole tick, without the reduction of
    planner/core/reduce.py (for the comparison of ``--versus-whole``)."""
    from models import load_snapshot
    from planner import plan, warm_up
    from planner.core.reduce import Reduction
    from planner.solver import cpsat

    warm_up()
    t0 = time.perf_counter()
    snap = load_snapshot(path)
    t1 = time.perf_counter()
    reduce = cpsat.reduce_problem
    if whole:
        cpsat.reduce_problem = lambda problem: (problem, Reduction())
    try:
        p = plan(snap, time_limit_s=limit)
    finally:
        cpsat.reduce_problem = reduce
    t2 = time.perf_counter()
    doc = p.model_dump(mode="json")
    row: dict[str, Any] = {
        "tick": path.name + (" (whole tick)" if whole else ""), "load_s": t1 - t0,
        "plan_wall_s": p.solver.wall_s, "call_s": t2 - t1, "status": p.status,
        "solver": p.solver.status, "admitted": dict(p.objective.admitted_gpus),
        "evictions": len(p.evictions), "placements": len(p.placements),
        "pending": sum(1 for j in snap.jobs if j.state == "pending"),
        "recent_evictions": len(snap.recent_evictions)}
    return row, doc


def cold(path: Path, limit: float) -> float:
    """Seconds for a fresh process to import the planner, read ``path`` and plan it."""
    code = ("import sys; from models import load_snapshot; from planner import plan; "
            f"plan(load_snapshot(sys.argv[1]), time_limit_s={limit!r})")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, check=True)
    return time.perf_counter() - t0


def _rank(row: dict[str, Any]) -> tuple[int, ...]:
    """Admitted GPUs, tier by tier (the objective's first items)."""
    return tuple(row["admitted"][t] for t in sorted(row["admitted"], key=int))


def _line(row: dict[str, Any]) -> str:
    adm = "/".join(str(row["admitted"].get(t, 0)) for t in ("1", "2", "3"))
    return (f"{row['tick']}: read {row['load_s']:.2f} s, plan {row['plan_wall_s']:.2f} s, "
            f"{row['status']} ({row['solver']}), admitted {adm}, {row['evictions']} "
            f"evictions, {row['pending']} pending, {row['recent_evictions']} in the window")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--generate", metavar="NODES:PENDING")
    what.add_argument("--replay", metavar="DIR")
    ap.add_argument("--out", help="where --generate writes the sequence")
    ap.add_argument("--ticks", type=int, default=6)
    ap.add_argument("--tick", type=float, default=60.0, help="seconds between ticks")
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--arrivals", type=int, default=5)
    ap.add_argument("--completions", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-cold", action="store_true", help="skip the fresh-process tick")
    ap.add_argument("--versus-whole", action="store_true",
                    help="plan every tick a second time with CP-SAT searching the whole "
                         "tick (without planner/core/reduce.py), for the comparison")
    ap.add_argument("--save", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.generate:
        if not args.out:
            ap.error("--generate needs --out")
        n, p = (int(x) for x in args.generate.split(":"))
        folder = Path(args.out)
        rows = record(n, p, args.ticks, folder, tick_s=args.tick, limit=args.time_limit,
                      arrivals=args.arrivals, completions=args.completions, seed=args.seed,
                      versus=args.versus_whole)
    else:
        folder = Path(args.replay)
        rows = []
        for path in sorted(folder.glob("tick-*.json")):
            rows.append(plan_file(path, args.time_limit)[0])
            print(_line(rows[-1]), file=sys.stderr)
            if args.versus_whole:
                rows[-1]["whole"] = plan_file(path, args.time_limit, whole=True)[0]
                print(_line(rows[-1]["whole"]), file=sys.stderr)
    if not rows:
        print(f"no tick-*.json in {folder}", file=sys.stderr)
        return 2
    steady = [r["plan_wall_s"] for r in rows[1:]] or [rows[0]["plan_wall_s"]]
    summary: dict[str, Any] = {
        "ticks": len(rows), "time_limit_s": args.time_limit,
        "first_plan_wall_s": rows[0]["plan_wall_s"],
        "steady_plan_wall_s_median": statistics.median(steady),
        "steady_read_s_median": statistics.median(r["load_s"] for r in rows[1:] or rows)}
    if args.versus_whole:
        whole = [r["whole"]["plan_wall_s"] for r in rows[1:]] or [rows[0]["whole"]["plan_wall_s"]]
        summary["steady_plan_wall_s_median_whole_tick"] = statistics.median(whole)
        summary["ticks_admitting_less_than_the_whole_tick"] = sum(
            _rank(r) < _rank(r["whole"]) for r in rows)
        summary["ticks_proven_optimal"] = sum(r["status"] == "optimal" for r in rows)
        summary["ticks_proven_optimal_whole_tick"] = sum(
            r["whole"]["status"] == "optimal" for r in rows)
    if not args.no_cold:
        summary["cold_process_s"] = cold(min(folder.glob("tick-*.json")), args.time_limit)
    print(json.dumps(summary, indent=2))
    if args.save:
        from benchmarks.bench_planner import machine

        Path(args.save).write_text(json.dumps(
            {"machine": machine(), "command": " ".join(sys.argv), "summary": summary,
             "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
