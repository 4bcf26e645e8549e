"""Benchmark: steady ticks, the latency of each tick over a recorded sequence of snapshots.

A scheduling loop (``slurm run``, a client of the service, the simulator) plans one
tick after another in one process, each snapshot a little different from the last.
This benchmark records such a sequence and plans every snapshot of it as that loop
does: one process, the planner warmed up (``planner.warm_up()``), one
``planner.Loop`` (what the last tick read and derived, and this one did not change,
taken over), each snapshot read from its file by the loop and planned.

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
- The first tick is planned with ``--time-limit``, the others (the steady ticks)
  with ``--steady-limit`` (default: the same).
- ``--versus-fresh`` plans each tick a second time as a single tick would be: a
  fresh ``plan(file, time_limit_s=--time-limit)`` without the loop, in the same
  process; each steady tick's plan is compared with it (the objective's order:
  admitted GPUs tier by tier, the priority value, then the least eviction cost).
- ``--versus-whole`` plans each tick once more with CP-SAT's strategies searching
  the whole tick, without taking out first what needs no search
  (planner/core/reduce.py).

``--repeat R`` replays the sequence R times, each time with a new loop and followed
by a cold process (so that both meet the same machine): the calls and the cold
process are each the median of the R repeats (the plans are the first repeat's).

Reported per tick: the call (reading the file and planning it), the plan wall
(``solver.wall_s``), the solver status, admitted GPUs per tier, evictions; then the
median steady tick against the cold one: the first snapshot planned with
``--time-limit`` in a fresh process (imports and reading included), as
``preempt-planner plan`` would.

    python benchmarks/bench_ticks.py --generate 4096:2000 --ticks 8 --out ticks-4096
    python benchmarks/bench_ticks.py --replay ticks-4096 --steady-limit 0.2 \
        --versus-fresh --versus-whole --save benchmarks/results/bench_ticks.json
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
           arrivals: int, completions: int, seed: int) -> list[dict[str, Any]]:
    """Write and plan ``ticks`` snapshots (see the module doc); one row per tick."""
    from planner import Loop
    from planner.sim.generate import generate

    out.mkdir(parents=True, exist_ok=True)
    doc = generate(nodes=nodes, pending=pending, seed=0, **GEN)
    rng = np.random.default_rng(seed)
    rows = []
    loop = Loop()
    for k in range(1, ticks + 1):
        path = out / f"tick-{k:06d}.json"
        path.write_text(json.dumps(doc))
        row, plan = plan_file(path, limit, loop=loop)
        rows.append(row)
        print(_line(row), file=sys.stderr)
        doc = carry_out(doc, plan, tick_s=tick_s, rng=rng, arrivals=arrivals,
                        completions=completions, seq=k)
    return rows


def plan_file(path: Path, limit: float, *, loop: Any = None, whole: bool = False
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read and plan one snapshot file in this process, with the ``loop``'s
    ``planner.Loop`` (None: a fresh plan() of the file): its row and the plan.
    ``whole``: CP-SAT's strategies search the whole tick, without the reduction of
    planner/core/reduce.py (for the comparison of ``--versus-whole``)."""
    from planner import plan, warm_up
    from planner.core.reduce import Reduction
    from planner.solver import cpsat

    warm_up()
    reduce = cpsat.reduce_problem
    if whole:
        cpsat.reduce_problem = lambda problem, **_kw: (problem, Reduction())
    t0 = time.perf_counter()
    try:
        p = (loop.plan if loop is not None else plan)(path, time_limit_s=limit)
    finally:
        t1 = time.perf_counter()
        cpsat.reduce_problem = reduce
    doc = p.model_dump(mode="json")
    obj = p.objective
    row: dict[str, Any] = {
        "tick": path.name + (" (whole tick)" if whole else "") + (
            "" if loop is not None else " (fresh)"),
        "time_limit_s": limit, "call_s": t1 - t0, "plan_wall_s": p.solver.wall_s,
        "status": p.status, "solver": p.solver.status, "admitted": dict(obj.admitted_gpus),
        "priority_value": obj.priority_value, "eviction_cost_gpu_s": obj.eviction_cost_gpu_s,
        "evictions": len(p.evictions), "placements": len(p.placements),
        "pending": len(p.placements) + len(p.deferred)}
    return row, doc


def cold(path: Path, limit: float) -> float:
    """Seconds for a fresh process to import the planner, read ``path`` and plan it."""
    code = ("import sys; from models import load_snapshot; from planner import plan; "
            f"plan(load_snapshot(sys.argv[1]), time_limit_s={limit!r})")
    t0 = time.perf_counter()
    # (the child runs in the repository, to import it: the file's path made absolute
    # so that a sequence recorded anywhere is found)
    subprocess.run([sys.executable, "-c", code, str(path.resolve())], cwd=REPO, check=True)
    return time.perf_counter() - t0


def _rank(row: dict[str, Any]) -> tuple[float, ...]:
    """The objective's order: admitted GPUs tier by tier, the priority value, then
    the least eviction cost."""
    return (*(row["admitted"][t] for t in sorted(row["admitted"], key=int)),
            row["priority_value"], -row["eviction_cost_gpu_s"])


def _line(row: dict[str, Any]) -> str:
    adm = "/".join(str(row["admitted"].get(t, 0)) for t in ("1", "2", "3"))
    return (f"{row['tick']}: call {row['call_s']:.2f} s (limit {row['time_limit_s']:g} s), "
            f"{row['status']} ({row['solver']}), admitted {adm}, {row['evictions']} "
            f"evictions, {row['pending']} pending")


def main(argv: list[str] | None = None) -> int:
    from planner import Loop

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--generate", metavar="NODES:PENDING")
    what.add_argument("--replay", metavar="DIR")
    ap.add_argument("--out", help="where --generate writes the sequence")
    ap.add_argument("--ticks", type=int, default=6)
    ap.add_argument("--tick", type=float, default=60.0, help="seconds between ticks")
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--steady-limit", type=float, default=None,
                    help="time limit of the ticks after the first (default: --time-limit)")
    ap.add_argument("--arrivals", type=int, default=5)
    ap.add_argument("--completions", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-cold", action="store_true", help="skip the fresh-process tick")
    ap.add_argument("--repeat", type=int, default=1,
                    help="replay the sequence this many times, each with a new loop and "
                         "followed by a cold process: per tick and for the cold process "
                         "the median (default 1)")
    ap.add_argument("--versus-fresh", action="store_true",
                    help="plan every tick a second time without the loop, at --time-limit")
    ap.add_argument("--versus-whole", action="store_true",
                    help="plan every tick a second time with CP-SAT searching the whole "
                         "tick (without planner/core/reduce.py), for the comparison")
    ap.add_argument("--save", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    steady_limit = args.time_limit if args.steady_limit is None else args.steady_limit
    from benchmarks.bench_planner import compile_sources, machine

    compiled = compile_sources()  # (the cold process imports bytecode, as a user's does)
    at_start = machine()  # (the machine as the replay starts: its load average then)
    if args.generate:
        if not args.out:
            ap.error("--generate needs --out")
        n, p = (int(x) for x in args.generate.split(":"))
        folder = Path(args.out)
        record(n, p, args.ticks, folder, tick_s=args.tick, limit=args.time_limit,
               arrivals=args.arrivals, completions=args.completions, seed=args.seed)
    else:
        folder = Path(args.replay)
    paths = sorted(folder.glob("tick-*.json"))
    if not paths:
        print(f"no tick-*.json in {folder}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    colds: list[float] = []
    for r in range(max(1, args.repeat)):
        loop = Loop()
        for k, path in enumerate(paths):  # the loop's pass first, alone, as a loop runs
            row = plan_file(path, args.time_limit if k == 0 else steady_limit, loop=loop)[0]
            print(_line(row), file=sys.stderr)
            if r == 0:
                row["call_s_repeats"] = [row["call_s"]]
                rows.append(row)
            else:
                rows[k]["call_s_repeats"].append(row["call_s"])
        del loop
        if not args.no_cold:  # (taken in turn with the loop's passes: the same machine)
            colds.append(cold(paths[0], args.time_limit))
            print(f"cold process: {colds[-1]:.2f} s", file=sys.stderr)
    for row in rows:  # (the plans of the first repeat; the calls' median of all)
        row["call_s"] = statistics.median(row["call_s_repeats"])
    for key, on, whole in (("fresh", args.versus_fresh, False),
                           ("whole", args.versus_whole, True)):
        for row, path in zip(rows, paths, strict=True) if on else ():
            row[key] = plan_file(path, args.time_limit, whole=whole)[0]
            print(_line(row[key]), file=sys.stderr)
    steady = rows[1:] or rows
    summary: dict[str, Any] = {
        "ticks": len(rows), "time_limit_s": args.time_limit, "steady_limit_s": steady_limit,
        "first_call_s": rows[0]["call_s"],
        "steady_call_s_median": statistics.median(r["call_s"] for r in steady),
        "steady_call_s_max": max(r["call_s"] for r in steady)}
    for key in ("fresh", "whole") if args.versus_fresh or args.versus_whole else ():
        if key in rows[0]:
            summary[f"{key}_call_s_median"] = statistics.median(r[key]["call_s"] for r in steady)
            summary[f"steady_ticks_ranking_below_{key}"] = sum(
                _rank(r) < _rank(r[key]) for r in steady)
            summary[f"steady_ticks_ranking_above_{key}"] = sum(
                _rank(r) > _rank(r[key]) for r in steady)
    summary["steady_ticks_proven_optimal"] = sum(r["status"] == "optimal" for r in steady)
    if colds:
        summary["repeats"] = len(colds)
        summary["cold_process_s"] = statistics.median(colds)
        summary["cold_process_s_repeats"] = colds
        summary["steady_over_cold"] = summary["steady_call_s_median"] / summary["cold_process_s"]
    print(json.dumps(summary, indent=2))
    if args.save:
        Path(args.save).write_text(json.dumps(
            {"machine": {**at_start, "bytecode_compiled_files": compiled},
             "command": " ".join(sys.argv), "summary": summary,
             "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
