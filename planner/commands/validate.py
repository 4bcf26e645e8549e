"""``preempt-planner validate``: check a snapshot (or a policy file) against the
contract and print a one-line summary; bad input lists every problem, exit 2."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from models import InputError, Snapshot, load_policy
from planner.commands._common import (
    EXIT_OK,
    EXIT_USAGE,
    add_snapshot_args,
    error,
    load_snapshot_arg,
    stdin_options,
)


def summary(snap: Snapshot) -> str:
    """``valid: N nodes, G GPUs, R running, P pending`` (GPUs counted on every node)."""
    gpus = sum(n.gpus for n in snap.nodes)
    return (f"valid: {len(snap.nodes)} nodes, {gpus} GPUs, {len(snap.running())} running, "
            f"{len(snap.pending())} pending")


def verdict(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The one-line summary and the same facts as JSON data (raises InputError)."""
    stdin_options([("SNAPSHOT", args.snapshot), ("--policy", args.policy)])
    if args.kind == "policy":
        pol = load_policy(Path(args.snapshot))
        tiers = ", ".join(str(t) for t in sorted(pol.tiers))
        pools = ", ".join(sorted(pol.pools)) or "none"
        return (f"valid policy: tiers {tiers}; restricted pools: {pools}",
                {"valid": True, "kind": "policy", "tiers": sorted(pol.tiers),
                 "restricted_pools": sorted(pol.pools)})
    snap = load_snapshot_arg(args.snapshot, args.policy)
    return summary(snap), {"valid": True, "kind": "snapshot", "nodes": len(snap.nodes),
                           "gpus": sum(n.gpus for n in snap.nodes),
                           "running": len(snap.running()), "pending": len(snap.pending())}


def run(args: argparse.Namespace) -> int:
    if args.kind == "policy" and args.policy:
        error("--policy makes no sense with --kind policy")
        return EXIT_USAGE
    if args.format != "json":
        print(verdict(args)[0])
        return EXIT_OK
    try:  # the verdict on stdout, for scripts (the exit status as ever)
        facts = verdict(args)[1]
    except InputError as exc:
        print(json.dumps({"valid": False, "kind": args.kind, "source": exc.source,
                          "errors": exc.errors}, indent=2))
        return EXIT_USAGE
    print(json.dumps(facts, indent=2))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a snapshot (or policy) file against the contract",
                       description="Check a snapshot against the data contract. Exit 0 with a "
                       "one-line summary, or exit 2 listing every problem with its field path.")
    add_snapshot_args(p)
    p.add_argument("--kind", choices=["snapshot", "policy"], default="snapshot",
                   help="what FILE is (default: snapshot; 'policy' checks a policy file alone)")
    p.add_argument("-o", "--format", choices=["table", "json"], default="table",
                   help="output: the one-line summary (table) or a JSON verdict with the "
                        "errors (json; exit status 2 when invalid, as ever)")
    p.set_defaults(func=run)
