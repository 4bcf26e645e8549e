"""``preempt-planner verify SNAPSHOT PLAN``: check a plan against its snapshot.

Exit status 0 when the plan is valid, 1 when it breaks a rule (each violation is
printed on its own line, citing the rule), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.markup import escape

from models import load_plan
from planner.checks.verify import verify
from planner.commands._common import (
    EXIT_INVALID,
    EXIT_OK,
    add_snapshot_args,
    load_snapshot_arg,
    out_console,
    stdin_options,
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "verify", help="check a plan against its snapshot (rules R1-R13, R15-R17, plan formulas)",
        description="Check PLAN against SNAPSHOT independently of the planner. Exits 0 when "
                    "the plan is valid, 1 when it breaks a rule, 2 on bad input.")
    add_snapshot_args(p)
    p.add_argument("plan", help="plan file (JSON or YAML; - reads standard input)")
    p.add_argument("-o", "--format", choices=["table", "json", "text"], default="table",
                   help="output format (default: table; 'text' is the old name of table)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    stdin_options([("SNAPSHOT", args.snapshot), ("--policy", args.policy), ("PLAN", args.plan)])
    snapshot = load_snapshot_arg(args.snapshot, args.policy)
    plan = load_plan(Path(args.plan))
    violations = verify(snapshot, plan)
    n_ev, n_pl = len(plan.evictions), len(plan.placements)
    if args.format == "json":
        doc = {"valid": not violations, "evictions": n_ev, "placements": n_pl,
               "violations": [{"rule": v.rule, "job": v.job, "message": v.message}
                              for v in violations]}
        print(json.dumps(doc, indent=2))
    else:
        console = out_console()
        if not violations:
            console.print(f"[green]plan is valid[/] ({n_ev} evictions, {n_pl} placements)")
        for v in violations:
            console.print(f"[bold red]{v.rule}[/]: {escape(v.message)}")
        if violations:
            console.print(f"[bold red]plan is invalid[/]: {len(violations)} violation(s)")
    return EXIT_INVALID if violations else EXIT_OK
