"""``preempt-planner validate``: check a snapshot (or a policy file) against the
contract and print a one-line summary; bad input lists every problem, exit 2."""

from __future__ import annotations

import argparse
from pathlib import Path

from models import Snapshot, load_policy
from planner.commands._common import (
    EXIT_OK,
    EXIT_USAGE,
    add_snapshot_args,
    err_console,
    load_snapshot_arg,
)


def summary(snap: Snapshot) -> str:
    """``valid: N nodes, G GPUs, R running, P pending`` (GPUs counted on every node)."""
    gpus = sum(n.gpus for n in snap.nodes)
    return (f"valid: {len(snap.nodes)} nodes, {gpus} GPUs, {len(snap.running())} running, "
            f"{len(snap.pending())} pending")


def run(args: argparse.Namespace) -> int:
    if args.kind == "policy":
        if args.policy:
            err_console.print("[bold red]error:[/] --policy makes no sense with --kind policy")
            return EXIT_USAGE
        pol = load_policy(Path(args.snapshot))
        tiers = ", ".join(str(t) for t in sorted(pol.tiers))
        pools = ", ".join(sorted(pol.pools)) or "none"
        print(f"valid policy: tiers {tiers}; restricted pools: {pools}")
        return EXIT_OK
    snap = load_snapshot_arg(args.snapshot, args.policy)
    print(summary(snap))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a snapshot (or policy) file against the contract",
                       description="Check a snapshot against the data contract. Exit 0 with a "
                       "one-line summary, or exit 2 listing every problem with its field path.")
    add_snapshot_args(p)
    p.add_argument("--kind", choices=["snapshot", "policy"], default="snapshot",
                   help="what FILE is (default: snapshot; 'policy' checks a policy file alone)")
    p.set_defaults(func=run)
