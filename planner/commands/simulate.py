"""``preempt-planner simulate``: replay a trace on a cluster with a planner."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from models import MAX_SEED, InputError, range_problems
from planner import SIM_PLANNERS
from planner.commands._common import (
    check_inputs_kept,
    check_output,
    err_console,
    print_table,
    progress_wanted,
    stdin_options,
    stdin_to_file,
    warn_settings,
    write_file,
    write_output,
)

PLANNER_CHOICES = list(SIM_PLANNERS)


def add_run_args(p: Any) -> None:
    """Arguments shared by ``simulate`` and ``compare``."""
    p.add_argument("--cluster", required=True,
                   help="cluster: a contract snapshot (jobs ignored) or a generator spec "
                        "(- reads standard input)")
    p.add_argument("--trace", required=True,
                   help="trace file (Philly CSV, Alibaba openb CSV or JSONL); a bare name is "
                        "also looked up in ../shared/traces (- reads standard input)")
    p.add_argument("--trace-format", default="auto", choices=["auto", "philly", "openb", "jsonl"])
    p.add_argument("--tick", type=float, default=60.0, help="seconds between ticks (default 60, at least 1)")
    p.add_argument("--days", type=float, help="simulated days (default: until every job is done)")
    p.add_argument("--start", help="simulated start (ISO-8601 or epoch; default first arrival)")
    p.add_argument("--seed", type=int, default=0,
                   help=f"seed of the synthesized job fields, 0 to {MAX_SEED:,} (default 0)")
    p.add_argument("--carry-over", action="store_true",
                   help="warm start: jobs submitted before --start that would still run join "
                        "at the start with their remaining time")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="multiply inter-arrival times around the start: 0.5 puts 2 x --days of "
                        "trace arrivals into --days (twice the load)")
    p.add_argument("--time-limit", type=float, default=1.0, help="planner time limit per tick")
    p.add_argument("--deterministic", action="store_true", help="deterministic planner mode")
    p.add_argument("--workers", type=int, default=None,
                   help="cores per plan: CP-SAT workers (default 2)")
    p.add_argument("--no-fairshare", action="store_true",
                   help="use the trace priority as is (no fair-share / queue-age ordering)")
    p.add_argument("--halflife", type=float, default=86400.0,
                   help="fair-share usage half-life in seconds (default 1 day)")
    p.add_argument("--lenient", action="store_true",
                   help="skip (and count) plan parts the simulator cannot execute instead of "
                        "stopping")
    p.add_argument("--tier-rule", metavar="RULE",
                   help="how trace jobs get their tier: team (Philly's default), gpus[:A,B] "
                        "(>= A GPUs tier 1, >= B tier 2), duration[:A,B] (< A s tier 1, < B s "
                        "tier 2) or map:FILE (team -> tier); docs/simulation.md")
    p.add_argument("--set", dest="policy_sets", action="append", default=[], metavar="KEY=VALUE",
                   help="change the policy (repeatable): thrash=null, thrash.max_fraction=0.1, "
                        "tiers.2.preempt_after_s=0, spare_ending_within_s=0, ...")
    p.add_argument("--no-time-limits", action="store_true",
                   help="running jobs carry no expected_end_at (R17 spares nothing)")


def check_run_args(args: Any) -> None:
    """Options of simulate and compare checked before any work (InputError), and a
    warning for settings that are ignored or beyond the machine; files given as ``-``
    are read from standard input into a temporary folder (which the worker
    processes of compare read too)."""
    bad = range_problems(seeds=[("--seed", args.seed)])
    if bad:
        raise InputError(bad)
    args.workers = warn_settings(args.deterministic, args.workers)
    for option in stdin_options([(o, getattr(args, o[2:])) for o in ("--cluster", "--trace",
                                                                     "--policy")]):
        setattr(args, option[2:], stdin_to_file(option))


def trace_file(name: str | None) -> str | None:
    """The file a --trace names (a bare name may be one of the shared traces: the
    simulator looks there too), for the check that no output replaces it."""
    from planner.sim.traces import resolve_trace_path

    if not name or name == "-":
        return name
    try:
        return str(resolve_trace_path(name))
    except InputError:  # (not found: the run says so)
        return name


def spec_from_args(args: Any, planner: str, policy: str | None, label: str | None = None,
                   extra_sets: list[tuple[str, Any]] | None = None) -> Any:
    from planner.sim.runner import RunSpec, parse_time

    cfg = {"planner": planner, "tick_s": args.tick, "days": args.days,
           "start": parse_time(args.start), "seed": args.seed, "time_limit_s": args.time_limit,
           "deterministic": args.deterministic,
           "workers": 2 if args.workers is None else args.workers,
           "fairshare": not args.no_fairshare, "halflife_s": args.halflife,
           "strict": not args.lenient, "label": label, "time_limits": not args.no_time_limits}
    return RunSpec(cluster=args.cluster, trace=args.trace, policy=policy,
                   trace_format=args.trace_format, carry_over=args.carry_over,
                   time_scale=args.time_scale, config=cfg, tier_rule=args.tier_rule,
                   policy_sets=[*policy_sets(args.policy_sets), *(extra_sets or [])])


def policy_sets(texts: list[str]) -> list[tuple[str, Any]]:
    """``--set KEY=VALUE`` options as (key, value) pairs (values parsed as JSON)."""
    from planner.sim.whatif import parse_assignment

    return [parse_assignment(t) for t in texts]


def register(sub: Any) -> None:
    p = sub.add_parser("simulate", help="discrete-event simulation of a trace under a planner",
                       description="Replay a workload trace on a cluster, calling a planner "
                                   "every tick, and report goodput, waste, evictions, thrash, "
                                   "storms and queueing delays.")
    add_run_args(p)
    p.add_argument("--policy", help="policy file (replaces the cluster file's policy; - reads "
                                    "standard input)")
    p.add_argument("--planner", default="cpsat", choices=PLANNER_CHOICES)
    p.add_argument("-o", "--format", default="table", choices=["table", "json"],
                   help="output format (default table)")
    p.add_argument("--out", help="write the output here instead of stdout")
    p.add_argument("--metrics-out", help="Prometheus text-format file of the run's metrics")
    p.add_argument("--result-out", help="JSON file with the raw run record (for compare/charts)")
    p.add_argument("--dump-ticks", metavar="DIR",
                   help="write each planner call's snapshot and plan into DIR (created; "
                        "tick-000001.json, plan-000001.json, ..., and ticks.jsonl, a line per "
                        "call); replay one with 'preempt-planner plan DIR/tick-000001.json'")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar on stderr (none either with --quiet or when stderr is "
                        "not a terminal)")
    p.set_defaults(func=run)


_DUMPED = ("tick-*.json", "plan-*.json", "ticks.jsonl")  # what --dump-ticks writes


def check_dump_dir(path: str | None) -> None:
    """``--dump-ticks DIR``: a folder that can be created or written, and that holds no
    ticks of another run (they would be overwritten): InputError before the run."""
    if not path:
        return
    check_output(path, "--dump-ticks", folder=True)
    folder = Path(path)
    if folder.is_dir() and any(any(folder.glob(name)) for name in _DUMPED):
        raise InputError([f"--dump-ticks: {path} already holds ticks (tick-*.json, plan-*.json "
                          + "or ticks.jsonl) of another run; give an empty or new folder"])


def tick_dumper(folder: Path) -> tuple[Any, Callable[[], None]]:
    """The simulator's ``on_tick`` for ``--dump-ticks``: each call's snapshot and plan
    as contract JSON files (written atomically), and a line per call in
    ``ticks.jsonl`` (its number, time, wall seconds, evictions, placements,
    deferrals and status), to find the tick worth replaying. Also returned: what
    removes the files and folders it made (for a run that fails)."""
    folder = Path(os.path.realpath(folder))  # ('x/../y' makes x to reach y: not here)
    top = folder  # the outermost folder made here (None: the folder was there)
    while not top.parent.exists():
        top = top.parent
    made: Path | None = None if folder.exists() else top
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError([f"--dump-ticks: cannot create {folder}: {exc.strerror or exc}"]) \
            from None
    index = folder / "ticks.jsonl"
    index.write_text("")

    def dump(k: int, snap: Any, plan: Any, wall: float) -> None:
        write_file(snap.model_dump_json(), folder / f"tick-{k:06d}.json", "--dump-ticks")
        write_file(plan.to_json(), folder / f"plan-{k:06d}.json", "--dump-ticks")
        now = plan.model_dump(mode="json", include={"now"})["now"]  # (as the plan writes it)
        line = {"tick": k, "now": now, "wall_s": round(wall, 4),
                "evictions": len(plan.evictions), "placements": len(plan.placements),
                "deferred": len(plan.deferred), "status": plan.status}
        with index.open("a") as f:
            f.write(json.dumps(line) + "\n")

    def undo() -> None:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
            return
        for name in _DUMPED:  # (the folder held none of these: check_dump_dir)
            for p in folder.glob(name):
                p.unlink(missing_ok=True)

    return dump, undo


def run(args: Any) -> int:
    from planner.sim.runner import prepare

    outputs = ((args.out, "--out"), (args.metrics_out, "--metrics-out"),
               (args.result_out, "--result-out"))
    for path, option in outputs:
        check_output(path, option)  # (before the run, which may be long)
    check_inputs_kept([("--cluster", args.cluster), ("--trace", trace_file(args.trace)),
                       ("--policy", args.policy)], [(option, path) for path, option in outputs])
    check_dump_dir(args.dump_ticks)
    check_run_args(args)
    spec = spec_from_args(args, args.planner, args.policy)
    sim = prepare(spec)
    if not args.dump_ticks:
        return _run_and_write(sim, args)
    sim.on_tick, undo = tick_dumper(Path(args.dump_ticks))
    try:
        return _run_and_write(sim, args)
    except BaseException:  # (bad input, an interruption, a bug: no half of a dump is left)
        undo()
        raise


def _run_and_write(sim: Any, args: Any) -> int:
    """Run, then write the outputs; when one cannot be written, the ones this run
    made before it are removed (none is left of a command that failed)."""
    from planner.sim.metrics import compute_metrics
    from planner.sim.prom import run_metrics
    from planner.sim.report import metrics_table

    if not progress_wanted(args.no_progress):
        res = sim.run()
    else:
        with Progress(TextColumn(f"simulating ({args.planner})"), BarColumn(),
                      TextColumn("{task.percentage:>3.0f}% of simulated time"),
                      TimeElapsedColumn(), console=err_console, transient=True,
                      auto_refresh=False) as bar:
            task = bar.add_task("sim", total=1.0)
            # refreshed here, at most 10 times a second, not by rich's refresh thread:
            # with another thread running, plan() keeps to one lane (planner/solver/lanes.py)
            shown = [0.0]

            def progress(done: float, total: float) -> None:
                now = time.monotonic()
                due = now - shown[0] >= 0.1
                bar.update(task, completed=done / max(total, 1e-9), refresh=due)
                if due:
                    shown[0] = now

            res = sim.run(progress)
    m = compute_metrics(res)
    files = []  # (text, path, option): each made before any is written
    if args.metrics_out:
        files.append((run_metrics(m), args.metrics_out, "--metrics-out"))
    if args.result_out:
        files.append((json.dumps(res.to_json()), args.result_out, "--result-out"))
    made: list[str] = []  # output files this run made (not there before)
    try:
        for text, path, option in files:
            new = not os.path.lexists(path)
            write_file(text, path, option)
            made += [path] if new else []
        if args.format == "json":  # (last: standard output cannot be taken back)
            write_output(json.dumps(m, indent=2, sort_keys=True), args.out)
        else:
            print_table(metrics_table(m), args.out)
    except BaseException:
        for path in made:
            Path(path).unlink(missing_ok=True)
        raise
    return 0
