"""``preempt-planner compare``: several planners or policies on the same cluster and
trace, run in parallel processes, with a Markdown report and PNG charts."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from models import InputError, load_policy, range_problems
from planner.commands._common import (
    check_inputs_kept,
    check_output,
    err_console,
    is_quiet,
    note,
    print_table,
    progress_wanted,
    stdout_closed,
    warn,
    write_file,
)
from planner.commands.simulate import (
    PLANNER_CHOICES,
    add_run_args,
    check_run_args,
    spec_from_args,
    trace_file,
)


def register(sub: Any) -> None:
    p = sub.add_parser("compare", help="compare planners/policies on one cluster and trace",
                       description="Run the same trace under several planners (and/or "
                                   "policies) in parallel and write a Markdown report with "
                                   "PNG charts (charts need matplotlib, the 'plots' extra).")
    add_run_args(p)
    p.add_argument("--planners", default="cpsat,greedy,slurm,naive",
                   help="comma-separated planners (default cpsat,greedy,slurm,naive)")
    p.add_argument("--policy", help="policy file for every run")
    p.add_argument("--policies", help="comma-separated policy files: each is run with every "
                                      "planner (label planner@policy)")
    p.add_argument("--variant", dest="variants", action="append", default=[],
                   metavar="NAME:KEY=VALUE[,KEY=VALUE...]",
                   help="a policy variant run with every planner next to the unchanged policy "
                        "(label planner@NAME; repeatable), e.g. no-thrash:thrash=null or "
                        "patient:tiers.2.preempt_after_s=1800,thrash.max_fraction=0.1")
    p.add_argument("--out", default="sim-report", help="report folder (default sim-report)")
    add_where_args(p)
    p.add_argument("--no-progress", action="store_true",
                   help="no progress lines on stderr (none either when it is not a terminal)")
    p.add_argument("-o", "--format", default="table", choices=["table", "json"],
                   help="output format (default table)")
    p.set_defaults(func=run)


# the files compare writes in its --out folder (the charts: planner/sim/report.py)
REPORT_FILES = ("report.md", "metrics.json", "over_time.png", "wasted_by_cause.png",
                "wait_cdf.png")


def add_where_args(p: Any) -> None:
    """Where the simulations run (compare and tune): local processes or a Ray cluster."""
    p.add_argument("--jobs", type=int, default=2,
                   help="parallel processes (default 2; at most one per run and per core)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run each simulation as a task on this Ray cluster (host:port, or auto) "
                        "instead of local processes (--jobs is then ignored); needs the 'ray' "
                        "extra (docs/tuning.md)")


def _work(spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    from planner.sim.runner import run_spec

    return run_spec(spec)


def variants(args: Any) -> list[Any]:
    planners = [p.strip() for p in args.planners.split(",") if p.strip()]
    bad = [p for p in planners if p not in PLANNER_CHOICES]
    if bad or not planners:
        raise InputError([f"--planners: unknown planner(s) {bad} (choose from "
                          f"{', '.join(PLANNER_CHOICES)})" if bad else "--planners: empty"])
    policies: list[str | None] = ([x.strip() for x in args.policies.split(",") if x.strip()]
                                  if args.policies else [args.policy])
    if not policies:
        raise InputError([f"--policies: no policy file in {args.policies!r}"])
    changes: list[tuple[str, list[tuple[str, Any]]]] = [
        ("", []), *(parse_variant(v) for v in args.variants)]
    out = []
    for pol in policies:
        for name, sets in changes:
            for pl in planners:
                tags = ([Path(pol).stem if pol else "default"] if len(policies) > 1 else [])
                tags += [name] if name else (["default"] if len(changes) > 1 and not tags else [])
                label = pl if not tags else f"{pl}@{'+'.join(tags)}"
                out.append(spec_from_args(args, pl, pol, label, sets))
    labels = [s.config["label"] or s.config["planner"] for s in out]
    if len(set(labels)) != len(labels):
        raise InputError([("--variant: two runs would have the same label (give each "
                           "variant its own name)")])
    return out


def parse_variant(text: str) -> tuple[str, list[tuple[str, Any]]]:
    """``NAME:KEY=VALUE[,KEY=VALUE...]`` (commas inside brackets belong to a value)."""
    from planner.sim.whatif import parse_assignment

    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep or not name or not rest.strip() or "=" in name:
        raise InputError([f"--variant {text!r}: expected NAME:KEY=VALUE[,KEY=VALUE...]"])
    parts, depth, cur = [], 0, ""
    for ch in rest:
        depth += ch in "[{" and 1 or (-1 if ch in "]}" else 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return name, [parse_assignment(p) for p in parts if p.strip()]


def run(args: Any) -> int:
    from planner.sim.engine import SimResult
    from planner.sim.report import comparison_table, markdown_report, write_charts
    from planner.sim.runner import prepare

    check_output(args.out, "--out", folder=True)  # (before the runs, which may be long)
    policies = [p.strip() for p in (args.policies or "").split(",") if p.strip()]
    check_inputs_kept([("--cluster", args.cluster), ("--trace", trace_file(args.trace)),
                       ("--policy", args.policy), *(("--policies", p) for p in policies)],
                      [("--out", Path(args.out) / name) for name in REPORT_FILES], folder=True)
    bad = range_problems(at_least_one=[("--jobs", args.jobs)])
    if bad:
        raise InputError(bad)
    check_run_args(args)
    specs = variants(args)
    for s in specs[:1]:
        sim = prepare(s)  # bad input is reported here, before any worker starts
    from planner.sim.runner import set_policy

    for s in specs[1:]:  # (and each variant's policy changes)
        set_policy(sim.cluster.policy if not s.policy else load_policy(s.policy), s.policy_sets)
    from planner.tune.backends import make_backend, run_all

    if args.ray and args.jobs != 2:
        warn("--jobs is ignored with --ray (the Ray cluster's CPUs decide)")
    backend = make_backend(args.ray, processes(args.jobs, len(specs)), is_quiet())
    show = progress_wanted(args.no_progress)
    if show:
        err_console.print(f"running {len(specs)} simulation(s) {backend.where}...")
    done: list[Any] = [None] * len(specs)
    t0 = time.monotonic()
    try:
        for n, (k, result) in enumerate(run_all(backend, _work, specs), 1):
            done[k] = result
            if show:  # (a line per finished run: the runs take minutes each)
                label = specs[k].config["label"] or specs[k].config["planner"]
                err_console.print(f"  {n}/{len(specs)} done: {label} "
                                  f"({time.monotonic() - t0:.0f} s so far)", markup=False)
    except BaseException:
        backend.close(cancel=True)
        raise
    backend.close()
    results = [SimResult.from_json(r) for r, _ in done]
    metrics = [m for _, m in done]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    charts = write_charts(results, metrics, out)
    skipped = None if charts else ("Charts skipped: matplotlib is not installed "
                                "(pip install 'preempt-planner[plots]' or pip install matplotlib).")
    first = specs[0]
    header = (f"Cluster `{first.cluster}`, trace `{first.trace}`"
              f"{' (carry-over warm start)' if first.carry_over else ''}, "
              f"tick {first.config['tick_s']:g} s, days {first.config['days']}, "
              f"seed {first.config['seed']}.")
    write_file(markdown_report(metrics, charts, header, skipped), out / "report.md")
    write_file(json.dumps(metrics, indent=2, sort_keys=True), out / "metrics.json")
    if stdout_closed():  # (closed by the caller: the report is in --out)
        pass
    elif args.format == "json":
        print(json.dumps(metrics, indent=2, sort_keys=True))
    else:
        print_table(comparison_table(metrics))
    if skipped:
        warn(skipped)
    note(f"report: {out / 'report.md'}")
    return 0


def processes(asked: int, runs: int) -> int:
    """Worker processes for ``runs`` simulations: what --jobs asks, but not more than
    the runs nor than this machine's cores (each run keeps a core busy), with a
    warning when --jobs asked for more cores than there are."""
    cores = os.cpu_count() or 1
    if asked > cores:
        warn(f"--jobs {asked} is more than this machine's {cores} core(s); running at most "
             f"{cores} simulation(s) at a time")
    return max(1, min(asked, cores, runs))
