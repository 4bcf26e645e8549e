"""``preempt-planner whatif``: plan variants of a snapshot side by side with the base."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table
from rich.text import Text

from planner import SIM_PLANNERS
from planner.commands._common import (
    PlainTable,
    add_snapshot_args,
    check_inputs_kept,
    check_output,
    check_time_limit,
    load_snapshot_arg,
    print_table,
    stdin_options,
    warn_settings,
    write_output,
)

PLANNERS = list(SIM_PLANNERS)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "whatif", help="plan variants of a snapshot and compare them with the base",
        description="Change snapshot fields (--set KEY=VALUE, lists addressed by id: "
                    "storage.nfs-a.write_gb_per_s=10, nodes.dgx-001.state=down, "
                    "policy.tiers.3.min_runtime_s=3600), add jobs (--add-job JSON), or list "
                    "several variants in a scenario file; every variant is planned and shown "
                    "next to the base with the differences highlighted.")
    add_snapshot_args(p)
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="change a field (repeatable); VALUE is JSON when it parses, else a string")
    p.add_argument("--add-job", dest="add_jobs", action="append", default=[], metavar="JSON",
                   help="add a job: a JSON object, @file or a file, - for standard input "
                        "(repeatable; pending by default)")
    p.add_argument("--scenario", help="scenario file: {\"variants\": [{name, set, add_jobs}]}")
    p.add_argument("--name", default="what-if", help="name of the --set/--add-job variant")
    p.add_argument("--planner", default="cpsat", choices=PLANNERS)
    p.add_argument("--time-limit", type=float, default=1.0)
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--workers", type=int, default=None,
                   help="cores per plan: CP-SAT workers (default 2)")
    p.add_argument("-o", "--format", default="table", choices=["table", "json"],
                   help="output format (default table)")
    p.add_argument("--out", help="write the output here instead of stdout")
    p.set_defaults(func=run)


def _cell(summary: dict[str, Any], key: str) -> str:
    v = summary.get(key)
    if key == "evicted" or key == "placed":
        names = list(v or [])
        more = f" (+{len(names) - 4})" if len(names) > 4 else ""
        return ", ".join(names[:4]) + more if names else "-"
    if key == "deferred":
        return ", ".join(f"{r} {n}" for r, n in (v or {}).items()) or "-"
    if isinstance(v, float):
        return f"{v:,.2f}"
    return str(v)


def render_table(result: dict[str, Any]) -> Table:
    base, variants = result["base"], result["variants"]
    t = PlainTable(title=f"what-if ({result['planner']})", show_lines=False)
    t.add_column("")
    t.add_column("base", justify="right")
    for v in variants:
        t.add_column(Text(v["name"]), justify="right")  # (a name is text, not markup)
    t.add_row("changes", "-", *[v["changes"] for v in variants], style="dim")
    rows: list[tuple[str, Any]] = [("status", "status")]
    for tier in base["admitted_gpus"]:
        rows.append((f"tier {tier} GPUs admitted / pending",
                     lambda s, tier=tier: f"{s['admitted_gpus'][tier]} / {s['pending_gpus'][tier]}"))
    rows += [("placements", "placements"), ("placed", "placed"), ("evictions", "evictions"),
             ("evicted", "evicted"), ("eviction cost (GPU-s)", "eviction_cost_gpu_s"),
             ("largest grace (s)", "max_grace_s"), ("storm flush (GB)", "storm_flush_gb"),
             ("storm flush time (s)", "storm_max_flush_s"), ("deferred", "deferred"),
             ("warnings", "warnings")]
    for label, get in rows:
        def val(s: dict[str, Any], get: Any = get) -> str:
            return get(s) if callable(get) else _cell(s, get)

        b = val(base)
        cells = []
        for v in variants:
            c = val(v)
            cells.append(Text(c, style="bold yellow") if c != b else c)
        t.add_row(label, b, *cells)
    return t


def run(args: Any) -> int:
    from models import InputError, range_problems, read_document
    from planner.sim.whatif import Variant, load_scenarios, parse_assignment, parse_job, run_whatif

    check_output(args.out, "--out")
    check_time_limit(args.time_limit)
    bad = range_problems(at_least_one=[("--workers", args.workers)])
    if bad:
        raise InputError(bad)
    stdin_options([("SNAPSHOT", args.snapshot), ("--policy", args.policy),
                   ("--scenario", args.scenario), *(("--add-job", j) for j in args.add_jobs)])
    check_inputs_kept([("SNAPSHOT", args.snapshot), ("--policy", args.policy),
                       ("--scenario", args.scenario),
                       *(("--add-job", j) for j in args.add_jobs)], [("--out", args.out)])
    snap = load_snapshot_arg(args.snapshot, args.policy)
    variants: list[Variant] = []
    if args.scenario:
        variants += load_scenarios(args.scenario)
    if args.sets or args.add_jobs:
        jobs = [parse_job(read_document("-") if j in ("-", "@-") else j) for j in args.add_jobs]
        variants.append(Variant(name=args.name, sets=[parse_assignment(s) for s in args.sets],
                                add_jobs=jobs))
    if not variants:
        raise InputError(["whatif: nothing to compare: give --set, --add-job or --scenario"])
    workers = warn_settings(args.deterministic, args.workers)
    result = run_whatif(snap, variants, args.planner, args.time_limit, args.deterministic,
                        workers)
    if args.format == "json":
        write_output(json.dumps(result, indent=2, sort_keys=True), args.out)
        return 0
    print_table(render_table(result), args.out)
    return 0
