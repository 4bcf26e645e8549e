"""``preempt-planner plan SNAPSHOT``: plan one tick and show or write the plan."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from models import MAX_SEED, InputError, Plan, Snapshot, range_problems
from planner.commands._common import (
    add_snapshot_args,
    check_inputs_kept,
    check_output,
    check_time_limit,
    load_snapshot_arg,
    out_console,
    stdin_options,
    stdout_closed,
    titled_table,
    warn_settings,
    write_file,
    write_output,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="plan one scheduling tick for a snapshot",
                       description="Choose which pending jobs start where and the minimum-cost "
                                   "set of running jobs to evict (contract v1).")
    add_snapshot_args(p)
    p.add_argument("-o", "--format", choices=["table", "json"], default="table",
                   help="table (default) or the contract's plan JSON on stdout")
    p.add_argument("--time-limit", type=float, default=1.0, metavar="S",
                   help="time budget in seconds for the whole call (default 1.0); when "
                        "the whole CP-SAT model does not fit, the greedy plan is improved "
                        "one neighbourhood of nodes at a time (solver status LNS)")
    p.add_argument("--deterministic", action="store_true",
                   help="one worker, deterministic time budget, fixed seed (R14)")
    p.add_argument("--workers", type=int, default=None,
                   help="cores the plan may use: CP-SAT workers, and a second lane on big "
                        "clusters (default 2)")
    p.add_argument("--seed", type=int, default=0,
                   help=f"solver random seed, 0 to {MAX_SEED:,} (default 0)")
    p.add_argument("--planner", choices=["cpsat", "greedy", "k8s", "slurm"], default="cpsat",
                   help="cpsat (default), or a baseline: greedy, Kubernetes-style (k8s), "
                        "Slurm-style (slurm)")
    p.add_argument("--bound", type=float, default=0.0, metavar="S",
                   help="after the plan, spend up to S seconds more proving how far it is "
                        "from the optimum (a relaxation solved with CP-SAT): solver.gap, "
                        "solver.bound and status optimal when proven (default 0: off)")
    p.add_argument("--max-jobs", type=int, default=50, metavar="N",
                   help="rows per table of the table output (50; 0: all); -o json and "
                        "--out always hold every job")
    p.add_argument("--out", help="write the plan JSON to FILE (atomically)")
    p.add_argument("--metrics-out", metavar="FILE",
                   help="also write Prometheus metrics of this tick to FILE")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from planner import plan

    check_time_limit(args.time_limit)
    if args.bound != 0:
        check_time_limit(args.bound, "--bound")
    if args.max_jobs < 0:
        raise InputError([f"--max-jobs: must be 0 (all rows) or more, got {args.max_jobs}"])
    bad = range_problems(at_least_one=[("--workers", args.workers)],
                         seeds=[("--seed", args.seed)])
    if bad:
        raise InputError(bad)
    check_output(args.out, "--out")
    check_output(args.metrics_out, "--metrics-out")
    stdin_options([("SNAPSHOT", args.snapshot), ("--policy", args.policy)])
    check_inputs_kept([("SNAPSHOT", args.snapshot), ("--policy", args.policy)],
                      [("--out", args.out), ("--metrics-out", args.metrics_out)])
    workers = warn_settings(args.deterministic, args.workers)
    if args.planner == "cpsat":  # (before the snapshot: the plan's time limit is for planning)
        from planner import warm_up

        warm_up(args.deterministic)
    snap = load_snapshot_arg(args.snapshot, args.policy)
    result = plan(snap, time_limit_s=args.time_limit, deterministic=args.deterministic,
                  workers=workers, planner=args.planner, seed=args.seed, bound_s=args.bound)
    text = result.to_json()
    if args.out:
        write_output(text, args.out)
    if args.metrics_out:
        from planner.sim.prom import plan_metrics

        write_file(plan_metrics(result, snap), args.metrics_out, "--metrics-out")
    if args.format == "json":
        if not args.out:
            write_output(text, None)
    elif not (args.out and stdout_closed()):  # (the plan is in --out: no table)
        # a pipe or a log gets whole lines rather than truncated ids
        render(snap, result, out_console(), max_jobs=args.max_jobs)
    return 0


def render(snap: Snapshot, p: Plan, console: Console, *, max_jobs: int = 50) -> None:
    """Rich tables: evictions, placements, deferred jobs (at most ``max_jobs`` rows
    each, 0: all; a line says how many more, by reason for deferred jobs), storm
    load, solver."""

    def rows(items: list) -> list:
        return items if not max_jobs else items[:max_jobs]

    def more(items: list, what: str, by: str = "") -> None:
        if max_jobs and len(items) > max_jobs:
            console.print(f"... and {len(items) - max_jobs:,} more {what}{by} (--max-jobs; "
                          "every one in the plan JSON: -o json or --out)")

    o = p.objective
    tiers = ", ".join(f"tier {t}: {g}" for t, g in sorted(o.admitted_gpus.items()))
    console.print(f"[bold]Plan[/] at {p.now:%Y-%m-%d %H:%M:%S}Z  status [bold]{p.status}[/]  "
                  f"admitted GPUs ({tiers})  priority value {o.priority_value}  "
                  f"eviction cost {o.eviction_cost_gpu_s:,.1f} GPU-s  evictions {o.evictions}")
    if p.evictions:
        t = titled_table("Evictions")
        for col in ("job", "tier", "for", "signal", "grace s", "flush s", "cost GPU-s",
                    "requeue hold until"):
            t.add_column(col, justify="right" if col.endswith("s") else "left")
        for e in rows(p.evictions):
            t.add_row(e.job, str(e.tier), ", ".join(e.preemptors), e.signal or "-",
                      f"{e.grace_s:g}", f"{e.flush_s:.3f}", f"{e.cost_gpu_s:,.1f}",
                      f"{e.requeue_hold_until:%H:%M:%S}")
        console.print(t)
        more(p.evictions, "evictions")
    if p.placements:
        jobs = snap.job_map()
        t = titled_table("Placements")
        for col in ("job", "tier", "GPUs", "nodes and GPU indices", "start after s"):
            t.add_column(col)
        for pl in rows(p.placements):
            j = jobs[pl.job]
            where = "; ".join(f"{part.node} [{','.join(map(str, part.gpus))}]"
                              for part in pl.placement)
            t.add_row(pl.job, str(j.tier), str(j.total_gpus), where, f"{pl.start_after_s:g}")
        console.print(t)
        more(p.placements, "placements")
    if p.deferred:
        t = titled_table("Deferred")
        for col in ("job", "reason", "until", "why"):
            t.add_column(col, overflow="fold")
        for d in rows(p.deferred):
            t.add_row(d.job, d.reason, f"{d.until:%m-%d %H:%M}" if d.until else "", d.detail)
        console.print(t)
        counts: dict[str, int] = {}
        for d in p.deferred:
            counts[d.reason] = counts.get(d.reason, 0) + 1
        more(p.deferred, "deferred jobs", " (all deferred: " + ", ".join(
            f"{r} {n:,}" for r, n in sorted(counts.items(), key=lambda kv: -kv[1])) + ")")
    if p.storm:
        t = titled_table("Checkpoint flush load per storage target")
        for col in ("storage", "flush GB", "flush s"):
            t.add_column(col)
        for s in p.storm:
            t.add_row(s.storage, f"{s.flush_gb:,.1f}", f"{s.flush_s:.2f}")
        console.print(t)
    for w in p.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")
    info = p.solver
    gap = "-" if info.gap is None else f"{info.gap:.2%}"
    console.print(f"solver: {info.engine} {info.status}, {info.wall_s:.3f} s, gap {gap}"
                  + (f" ({info.detail})" if info.detail else ""), style="dim")
