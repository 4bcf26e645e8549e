"""``preempt-planner tune``: search a space of policies on a trace for the Pareto
front of the objectives, and write the chosen policy (docs/tuning.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from models import MAX_SEED, InputError, range_problems
from planner import PLANNERS
from planner.commands._common import (
    check_inputs_kept,
    check_output,
    err_console,
    is_quiet,
    note,
    print_table,
    progress_wanted,
    stdout_closed,
    titled_table,
    warn,
    warn_settings,
)
from planner.commands.simulate import trace_file

DEFAULT_OBJECTIVES = "wasted,thrash,t1_p95,t2_p95"
TUNED_PLANNERS = list(PLANNERS)
# the files tune writes in its --out folder (planner/tune/output.py)
OUT_FILES = ("report.md", "front.json", "front.png", "policy.yaml")


def register(sub: Any) -> None:
    from planner.commands.compare import add_where_args

    p = sub.add_parser(
        "tune", help="search policies on a trace: Pareto front and a chosen policy",
        description="Simulate the policies of a space (policy keys with ranges or choices) on "
                    "trace windows x loads x seeds, find the Pareto front of the objectives "
                    "(grid for small spaces, Optuna otherwise, pruning trials dominated on the "
                    "first windows) and write the front, a scatter chart and the chosen policy. "
                    "Every simulation is cached: a rerun or an extended search runs only what "
                    "is new. docs/tuning.md")
    p.add_argument("--cluster", required=True,
                   help="cluster: a contract snapshot (jobs ignored) or a generator spec")
    p.add_argument("--trace", required=True,
                   help="trace file (Philly CSV, Alibaba openb CSV or JSONL); a bare name is "
                        "also looked up in ../shared/traces")
    p.add_argument("--space", required=True,
                   help="space file: params (dotted policy keys with choices or low/high[/step]"
                        "[/log]) and fixed (changes every trial shares)")
    p.add_argument("--out", required=True, help="output folder (report.md, front.json, "
                                                "front.png, policy.yaml, cache/)")
    p.add_argument("--policy", help="base policy file (replaces the cluster file's policy)")
    p.add_argument("--set", dest="policy_sets", action="append", default=[], metavar="KEY=VALUE",
                   help="change the base policy of every run, the default reference too "
                        "(repeatable; as simulate --set)")
    p.add_argument("--planner", default="cpsat", choices=TUNED_PLANNERS,
                   help="the planner the policy is tuned for (default cpsat; naive always runs "
                        "as a reference)")
    p.add_argument("--windows", metavar="START[:DAYS],...",
                   help="trace windows (ISO-8601 or epoch starts, each --days long unless "
                        "':DAYS' says); default: the one window of --start and --days")
    p.add_argument("--start", help="the start of the one window (default: the first arrival)")
    p.add_argument("--days", type=float, help="days per window (default: until every job is done)")
    p.add_argument("--carry-over", action="store_true",
                   help="warm start: jobs submitted before a window's start that would still "
                        "run join at the start")
    p.add_argument("--loads", default="1",
                   help="load factors, comma-separated: L puts L x --days of arrivals into "
                        "--days (default 1)")
    p.add_argument("--seeds", default="0", help="seeds of the synthesized job fields, "
                                                "comma-separated (default 0)")
    p.add_argument("--trials", type=int, default=50,
                   help="trials of the search (default 50); a grid of at most this many points "
                        "is run whole")
    p.add_argument("--search", default="auto", choices=["auto", "grid", "optuna"],
                   help="auto (default): the grid when the space is one of at most --trials "
                        "points, else Optuna")
    p.add_argument("--sampler", default="tpe", choices=["tpe", "nsga2"],
                   help="Optuna's multi-objective sampler (default tpe)")
    p.add_argument("--sampler-seed", type=int, default=0, help="seed of the sampler (default 0)")
    p.add_argument("--batch", type=int,
                   help="trials run at once (default: the parallel slots, at least 2)")
    p.add_argument("--objective", default=DEFAULT_OBJECTIVES, metavar="NAME[=WEIGHT],...",
                   help="objectives to minimise, with weights for the chosen trade-off: "
                        "wasted, thrash, evictions (per completed job), tN_p50/p95/p99/max "
                        f"(tier N's wait) (default {DEFAULT_OBJECTIVES})")
    p.add_argument("--constraint", dest="constraints", action="append", default=[],
                   metavar="NAME<=BOUND",
                   help="a limit every chosen trial meets (repeatable): t1_p95<=1.1*naive, "
                        "thrash<=0, t2_p95<=default")
    p.add_argument("--no-prune", action="store_true",
                   help="run every window of every trial (no pruning of dominated trials)")
    p.add_argument("--tick", type=float, default=60.0, help="seconds between ticks (default 60, at least 1)")
    p.add_argument("--time-limit", type=float, default=1.0, help="planner time limit per tick")
    p.add_argument("--deterministic", action="store_true", help="deterministic planner mode")
    p.add_argument("--workers", type=int, default=None,
                   help="cores per plan (default 1: the simulations run side by side)")
    p.add_argument("--trace-format", default="auto", choices=["auto", "philly", "openb", "jsonl"])
    p.add_argument("--tier-rule", metavar="RULE", help="as simulate --tier-rule")
    p.add_argument("--no-time-limits", action="store_true",
                   help="running jobs carry no expected_end_at (R17 spares nothing)")
    add_where_args(p)
    p.add_argument("--cache", help="simulation cache folder (default OUT/cache; share one "
                                   "between searches)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress lines on stderr (none either when it is not a terminal)")
    p.add_argument("-o", "--format", default="table", choices=["table", "json"],
                   help="output format: the front as a table (default) or front.json's record")
    p.set_defaults(func=run)


def _numbers(text: str, option: str, kind: type) -> list[Any]:
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            v = kind(part)
        except ValueError:
            raise InputError([f"{option}: {part!r} is not a number"]) from None
        if kind is float and not (math.isfinite(v) and v > 0):
            raise InputError([f"{option}: {part!r} must be a positive number"])
        if kind is int and not 0 <= v <= MAX_SEED:
            raise InputError([f"{option}: {part!r} must be 0 to {MAX_SEED:,}"])
        if v in out:
            raise InputError([f"{option}: {part!r} is given twice"])
        out.append(v)
    if not out:
        raise InputError([f"{option}: give at least one"])
    return out


def settings_from_args(args: Any) -> Any:
    from planner.commands.simulate import policy_sets
    from planner.tune.search import Settings, window_list

    return Settings(cluster=args.cluster, trace=args.trace,
                    windows=window_list(args.windows, args.start, args.days),
                    loads=_numbers(args.loads, "--loads", float),
                    seeds=_numbers(args.seeds, "--seeds", int), planner=args.planner,
                    policy=args.policy, sets=policy_sets(args.policy_sets),
                    trace_format=args.trace_format, tier_rule=args.tier_rule,
                    carry_over=args.carry_over, tick_s=args.tick, time_limit_s=args.time_limit,
                    workers=args.workers, deterministic=args.deterministic,
                    time_limits=not args.no_time_limits)


def _progress_line(fmt: Any, objectives: list[Any]) -> Any:
    def show(p: dict[str, Any]) -> None:
        parts = [f"trials {p['trials_done']}/{p['trials']} done"]
        if p["pruned"] or p["failed"]:
            parts[-1] += f" ({p['pruned']} pruned, {p['failed']} failed)"
        parts.append(f"simulations {p['simulations_run']} run + {p['simulations_cached']} "
                     "cached")
        if p["best"]:
            vals = ", ".join(f"{n} {fmt(n, v)}" for n, v in p["best"]["values"].items())
            parts.append(f"best so far {p['best']['trial']} ({vals}; front {p['front']})")
        parts.append(f"{p['elapsed_s'] / 60:.1f} min")
        if p["left_s"] is not None:
            parts[-1] += f", about {p['left_s'] / 60:.0f} min left"
        err_console.print("  " + " | ".join(parts), markup=False)
    return show


def run(args: Any) -> int:
    from planner.sim.traces import parse_tier_rule
    from planner.tune.backends import make_backend
    from planner.tune.cache import SimCache
    from planner.tune.output import fmt_value, write_outputs
    from planner.tune.search import Tuner
    from planner.tune.space import load_space, parse_constraints, parse_objectives

    check_output(args.out, "--out", folder=True)
    if args.cache:
        check_output(args.cache, "--cache", folder=True)
    check_inputs_kept([("--cluster", args.cluster), ("--trace", trace_file(args.trace)),
                       ("--space", args.space), ("--policy", args.policy)],
                      [("--out", Path(args.out) / name) for name in OUT_FILES], folder=True)
    bad = range_problems([("--tick", args.tick), ("--time-limit", args.time_limit),
                          ("--days", args.days)],
                         [("--trials", args.trials), ("--jobs", args.jobs),
                          ("--workers", args.workers), ("--batch", args.batch)],
                         seeds=[("--sampler-seed", args.sampler_seed)])
    if bad:
        raise InputError(bad)
    for option in ("cluster", "trace", "space", "policy"):
        if getattr(args, option) == "-":
            raise InputError([(f"--{option} -: tune reads its files again in every worker; give "
                               "a file")])
    args.workers = 1 if args.workers is None else warn_settings(args.deterministic, args.workers)
    parse_tier_rule(args.tier_rule)
    objectives = parse_objectives(args.objective)
    constraints = parse_constraints(args.constraints)
    space = load_space(args.space)
    if args.windows and args.start:
        raise InputError(["--start: with --windows, each window gives its start"])
    settings = settings_from_args(args)
    jobs = args.jobs
    if not args.ray:
        from planner.commands.compare import processes

        jobs = processes(args.jobs, 10**9)
    elif args.jobs != 2:
        warn("--jobs is ignored with --ray (the Ray cluster's CPUs decide)")
    show = progress_wanted(args.no_progress)
    out = Path(args.out)
    backend = make_backend(args.ray, jobs, is_quiet())
    try:
        tuner = Tuner(settings, space, objectives, constraints, backend,
                      SimCache(args.cache or out / "cache"), trials=args.trials,
                      search=args.search, sampler=args.sampler, sampler_seed=args.sampler_seed,
                      batch=args.batch, prune=not args.no_prune,
                      progress=_progress_line(fmt_value, objectives) if show else None)
        if show:
            cells = len(settings.cells())
            size = (f"a grid of {space.grid_size():,} point(s)" if tuner.mode == "grid"
                    else f"Optuna {args.sampler.upper()}, {args.trials} trial(s)")
            err_console.print(f"tuning: {size} x {cells} simulation(s) each, plus the default "
                              f"policy and naive, {backend.where}...", markup=False)
        tuner.check_inputs()  # (bad input is reported here, before any worker starts)
        rec = tuner.run()
    except BaseException:
        backend.close(cancel=True)
        raise
    backend.close()
    files = write_outputs(rec, out)
    if stdout_closed():  # (closed by the caller: the front is in --out)
        pass
    elif args.format == "json":
        print(json.dumps(rec, indent=1, sort_keys=True))
    else:
        print_table(front_table(rec))
    failed = [t for t in rec["trials"] if t["state"] == "failed"]
    if failed:
        warn(f"{len(failed)} trial(s) failed; the first: {failed[0]['trial']}: "
             f"{failed[0].get('error')}")
    if files["skipped"]:
        warn(files["skipped"])
    if rec["front"] and not rec["front_feasible"]:
        warn("no trial meets every --constraint; the front is that of all complete trials")
    sims = rec["simulations"]
    note(f"{sims['run']} simulation(s) run, {sims['cached']} from the cache, in "
         f"{rec['wall_s'] / 60:.1f} min; report: {files['report']}"
         + (f"; policy: {files['policy']}" if files["policy"] else ""))
    return 0


def front_table(rec: dict[str, Any]) -> Any:
    from planner.tune.output import front_rows

    header, rows = front_rows(rec)
    n_keys = len(rec["space"]["params"])
    t = titled_table(f"Pareto front ({len(rec['front'])} of {len(rec['trials'])} trials; means "
                     "over the simulations)")
    for k, h in enumerate(header):
        t.add_column(h, justify="left" if k <= n_keys else "right")
    for r in rows:
        t.add_row(*r)
    return t
