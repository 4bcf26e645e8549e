"""``preempt-planner generate``: a random but realistic snapshot (see
``planner.sim.generate``); the same arguments and seed give byte-identical output."""

from __future__ import annotations

import argparse
from typing import Any

from models import MAX_SEED, InputError, load_snapshot, range_problems
from planner.commands._common import (
    EXIT_OK,
    EXIT_USAGE,
    add_json_format,
    check_output,
    err_console,
    error,
    progress_wanted,
    write_output,
)
from planner.sim.generate import DEFAULT_NOW, generate, parse_mix, to_json


def _mix(int_keys: bool) -> Any:
    def parse(text: str) -> dict[Any, float]:
        try:
            return parse_mix(text, int_keys=int_keys)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = "mix"
    return parse


def _share(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return x


def _int_at_least(minimum: int, complaint: str) -> Any:
    """An argparse type: an integer of at least ``minimum``, else ``complaint``."""
    def parse(text: str) -> int:
        try:
            x = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if x < minimum:
            raise argparse.ArgumentTypeError(f"{text} {complaint}")
        return x

    return parse


_positive = _int_at_least(1, "must be at least 1")
_count = _int_at_least(0, "must not be negative")


MAX_NODES = 200_000  # 1.6 million GPUs, 16 x the largest benchmark: about 10 min, 8 GB
MAX_PENDING = 200_000  # 4 x the default of the largest cluster: about 25 s, 0.7 GB
BIG_NODES = 5_000  # from here the command says what it is doing on stderr


def run(args: argparse.Namespace) -> int:
    import time

    check_output(args.out, "--out")
    bad = range_problems(seeds=[("--seed", args.seed)])
    if bad:
        raise InputError(bad)
    if args.nodes > MAX_NODES:
        raise InputError([(f"--nodes: at most {MAX_NODES:,} (about 1.6 million GPUs), got "
                          f"{args.nodes:,}")])
    if args.pending is not None and args.pending > MAX_PENDING:
        raise InputError([(f"--pending: at most {MAX_PENDING:,} pending jobs (four times the "
                          f"default of the largest cluster), got {args.pending:,}")])
    # progress lines from BIG_NODES nodes (on a terminal, not with --quiet)
    say = (err_console.print if args.nodes >= BIG_NODES and progress_wanted()
           else (lambda *_a, **_k: None))
    t0 = time.monotonic()
    say(f"generating {args.nodes:,} nodes...", highlight=False)
    try:
        snap = generate(nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                        nvlink_mix=args.nvlink_mix, occupancy=args.occupancy,
                        tier_mix=args.tier_mix, immune_share=args.immune_share,
                        multinode_share=args.multinode_share, pending=args.pending,
                        pools=args.pools, blocks_per=args.blocks_per, seed=args.seed,
                        now=args.now, drain_share=args.drain_share,
                        down_share=args.down_share)
    except ValueError as exc:
        error(f"generate: {exc}")
        return EXIT_USAGE
    say(f"checking it against the contract ({time.monotonic() - t0:.0f} s so far)...",
        highlight=False)
    load_snapshot(snap)  # a generated snapshot must satisfy the contract
    say(f"writing it ({time.monotonic() - t0:.0f} s so far)...", highlight=False)
    write_output(to_json(snap), args.out)
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate a random, realistic cluster snapshot",
                       description="Generate a synthetic snapshot (contract v1). The same "
                       "arguments and --seed give byte-identical output.")
    p.add_argument("--nodes", type=_positive, required=True, help="number of nodes")
    p.add_argument("--gpus-per-node", type=_positive, default=8, help="GPUs per node (8)")
    p.add_argument("--nvlink-mix", type=_mix(False), default=None, metavar="MIX",
                   help="share of nodes per NVLink layout "
                   "(nvswitch=0.6,pairs=0.2,cube=0.1,none=0.1)")
    p.add_argument("--occupancy", type=_share, default=0.9,
                   help="share of GPUs held by running jobs (0.9)")
    p.add_argument("--tier-mix", type=_mix(True), default=None, metavar="MIX",
                   help="share of jobs per tier, tiers 1 to 1,000,000 (1=0.2,2=0.4,3=0.4)")
    p.add_argument("--immune-share", type=_share, default=0.25,
                   help="share of running jobs still inside their tier's min_runtime (0.25)")
    p.add_argument("--multinode-share", type=_share, default=0.1,
                   help="share of running GPUs (and of pending jobs) in multi-node gangs (0.1)")
    p.add_argument("--pending", type=_count, default=None,
                   help=f"number of pending jobs, at most {MAX_PENDING:,} (default: nodes/4, "
                        "at least 2)")
    p.add_argument("--pools", action="store_true",
                   help="put about an eighth of the nodes in pool 'reserved' (tier 1 only)")
    p.add_argument("--blocks-per", type=_positive, default=16, metavar="K",
                   help="nodes per block/rack (16)")
    p.add_argument("--drain-share", type=_share, default=0.02, help="share of drain nodes (0.02)")
    p.add_argument("--down-share", type=_share, default=0.01, help="share of down nodes (0.01)")
    p.add_argument("--now", default=DEFAULT_NOW, help=f"snapshot time ({DEFAULT_NOW})")
    p.add_argument("--seed", type=int, default=0, help=f"random seed, 0 to {MAX_SEED:,} (0)")
    p.add_argument("--out", help="write to FILE instead of stdout")
    add_json_format(p, "the snapshot")
    p.set_defaults(func=run)
