"""``preempt-planner slurm``: the Slurm adapter on the command line.

  slurm snapshot [--config FILE] [--default-tier N]
                                       contract snapshot of the live cluster
  slurm apply PLAN [--dry-run] [--force] [--snapshot FILE]
                                       carry out a plan (pin, signal, requeue)
  slurm run [--interval 30] [--ticks N] [--dry-run] [--default-tier N]
                                       snapshot, plan, apply, every interval

`snapshot` and `run` refuse a config that maps no job to a tier (exit 2) unless
--default-tier is given; `apply` refuses a plan older than max_plan_age_s
(default 2 x interval_s) unless --force. A Slurm command that fails is the
answer no (exit status 1); bad input (config, snapshot or plan) is 2. See
docs/slurm.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from planner.adapters.slurm.config import CONFIG_ENV, ConfigError, SlurmConfig, load_config
from planner.commands._common import (
    add_json_format,
    check_inputs_kept,
    check_output,
    stdin_options,
    write_output,
)
from planner.interrupts import sigterm_interrupts

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add ``slurm`` with its actions to an argparse subparsers object."""
    p = subparsers.add_parser(
        "slurm", help="Slurm adapter: snapshot from squeue/sinfo, apply plans, tick loop",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="slurm_command", metavar="ACTION")
    sub.required = True

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--config", help=f"adapter config, YAML or JSON (default: ${CONFIG_ENV}"
                                        ", else built-in defaults; - reads standard input)")
        q.add_argument("--log-level", default="INFO",
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    def default_tier(q: argparse.ArgumentParser) -> None:
        q.add_argument("--default-tier", type=int, metavar="N",
                       help="tier of every job the config's tiers mapping (partitions, qos, "
                            "accounts) leaves without one; without it a config that maps no "
                            "job is refused")

    s = sub.add_parser("snapshot", help="build a contract snapshot from squeue/sinfo JSON")
    common(s)
    default_tier(s)
    s.add_argument("--squeue-json", help="read this 'squeue --json' output instead of "
                                         "running squeue")
    s.add_argument("--nodes-json", help="read this 'sinfo --json' or 'scontrol show nodes "
                                        "--json' output instead of running it")
    s.add_argument("--now", help="snapshot time (ISO-8601 or epoch; default: the clock)")
    s.add_argument("--out", help="write the snapshot here (default: stdout)")
    add_json_format(s, "the snapshot")
    s.set_defaults(func=cmd_snapshot)

    a = sub.add_parser("apply", help="carry out a plan: signal, requeue-hold and pin")
    common(a)
    a.add_argument("plan", help="plan file (JSON or YAML)")
    a.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a.add_argument("--report", help="write a JSON report of every command here")
    a.add_argument("--force", action="store_true",
                   help="carry out a plan older than max_plan_age_s (default 2 x interval_s)")
    a.add_argument("--snapshot", help="the snapshot the plan was made from: each victim must "
                                      "still run on exactly its nodes there (default: on one "
                                      "of its preemptors' planned nodes)")
    a.add_argument("-o", "--format", choices=["table", "json"], default="table",
                   help="table (default): the commands, one a line, as they run; json: the "
                        "report of every command (as --report writes it) on stdout")
    a.set_defaults(func=cmd_apply)

    r = sub.add_parser("run", help="tick continuously: snapshot, plan, apply")
    common(r)
    default_tier(r)
    r.add_argument("--interval", type=float, help="seconds between ticks (default: config "
                                                  "interval_s, 30)")
    r.add_argument("--ticks", type=int, help="stop after this many ticks")
    r.add_argument("--dry-run", action="store_true", help="plan but only print the commands")
    r.add_argument("--plan-dir", help="write each tick's snapshot, plan and report here")
    r.set_defaults(func=cmd_run)


def _setup_logging(level: str) -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(stream=sys.stderr, level=level,
                            format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("planner.slurm").setLevel(level)


def _config(args: argparse.Namespace) -> SlurmConfig | None:
    """The config of --config (- is standard input), else $PREEMPT_PLANNER_SLURM_CONFIG,
    else the defaults; bad input raises InputError (a misspelt field gets a
    suggestion), a --default-tier below 1 says so and gives None."""
    import os

    from pydantic import ValidationError

    from models import InputError, read_document, suggest_fields
    from planner.adapters.slurm.config import config_from_dict, error_lines, unmanaged_problem

    name = args.config or os.environ.get(CONFIG_ENV) or None
    if name is None:
        cfg = load_config(None)
    else:
        doc = read_document(name)  # (JSON or YAML by content; YAML alias bombs refused)
        if not isinstance(doc, dict | type(None)):
            raise InputError([f"config: must hold a mapping, not {type(doc).__name__}"], name)
        base = Path.cwd() if name == "-" else Path(name).resolve().parent
        name = "(standard input)" if name == "-" else name
        try:
            cfg = config_from_dict(doc or {}, base=base, source=name)
        except ConfigError as exc:
            cause = exc.__cause__  # (pydantic's errors, when it says)
            lines = error_lines(cause) if isinstance(cause, ValidationError) else [str(exc)]
            raise InputError(suggest_fields(lines, SlurmConfig), name) from None
    tier = getattr(args, "default_tier", None)
    if tier is not None:
        if tier < 1:
            print(f"error: --default-tier: must be a tier number >= 1, got {tier}",
                  file=sys.stderr)
            return None
        if tier == cfg.tiers.unmanaged:
            raise InputError([unmanaged_problem(["--default-tier"], tier) or ""],
                             _config_name(args))
        cfg = cfg.model_copy(update={"tiers": cfg.tiers.model_copy(update={"default": tier})})
    return cfg


def _config_name(args: argparse.Namespace) -> str:
    import os

    name = args.config or os.environ.get(CONFIG_ENV)
    return f"slurm config {name}" if name else \
        f"slurm config (none given: no --config, ${CONFIG_ENV} unset)"


def _tier_policy_error(cfg: SlurmConfig, args: argparse.Namespace) -> Any:
    """A mapping, default or --default-tier to a tier the policy does not have
    (InputError), else None."""
    from planner.adapters.slurm.parse import tier_policy_error

    given = getattr(args, "default_tier", None) is not None
    return tier_policy_error(cfg, _config_name(args),
                             "--default-tier" if given else "tiers.default")


def _warn(lines: list[str]) -> None:
    from planner.commands._common import warn

    for line in lines:
        warn(line)


def cmd_snapshot(args: argparse.Namespace) -> int:
    from models import InputError, load_snapshot, read_document
    from planner.adapters.slurm.parse import (
        build_snapshot,
        check_document,
        parse_time,
        tier_mapping_error,
        unmapped_jobs_error,
    )
    from planner.adapters.slurm.run import NO_STATE_FILE, SlurmError, read_slurm
    from planner.adapters.slurm.state import AdapterState

    _setup_logging(args.log_level)
    check_output(args.out, "--out")
    inputs = [("--config", args.config), ("--squeue-json", args.squeue_json),
              ("--nodes-json", args.nodes_json)]
    stdin_options(inputs)
    check_inputs_kept(inputs, [("--out", args.out)])
    cfg = _config(args)
    if cfg is None:
        return EXIT_USAGE
    import time

    now = time.time()
    if args.now:
        t = parse_time(args.now)
        if t is None:
            raise InputError([f"--now: {args.now!r} is not a time"])
        now = t
    try:
        if args.squeue_json or args.nodes_json:
            if not (args.squeue_json and args.nodes_json):
                print("error: give both --squeue-json and --nodes-json", file=sys.stderr)
                return EXIT_USAGE
            sources = (f"--squeue-json {args.squeue_json}", f"--nodes-json {args.nodes_json}")
            squeue, nodes = read_document(args.squeue_json), read_document(args.nodes_json)
        else:
            sources = (f"{cfg.commands.squeue} --all --json",
                       "the node listing (sinfo/scontrol --json)")
            squeue, nodes = read_slurm(cfg)
    except SlurmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    # a kubectl list, a snapshot, sinfo given as squeue, ...: one message, exit 2
    # (before the config's tier mapping: the wrong document is the first thing to fix)
    check_document(squeue, "squeue", sources[0])
    check_document(nodes, "nodes", sources[1])
    refused = tier_mapping_error(cfg, _config_name(args)) or _tier_policy_error(cfg, args)
    if refused is not None:
        raise refused
    try:
        state = AdapterState.load(cfg.state_file)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    result = build_snapshot(squeue, nodes, cfg, now=now, state=state, sources=sources)
    from planner.commands._common import note as say

    for note in result.notes:
        say(f"note: {note}")
    unmapped = unmapped_jobs_error(result, _config_name(args))
    if unmapped is not None:
        raise unmapped
    _warn(result.warnings + ([NO_STATE_FILE] if cfg.state_file is None else []))
    load_snapshot(result.snapshot)  # raises InputError (exit 2) on a bad snapshot
    write_output(json.dumps(result.snapshot, indent=1), args.out)
    return EXIT_OK


def cmd_apply(args: argparse.Namespace) -> int:
    from models import InputError, load_plan, read_document
    from planner.adapters.slurm.apply import apply_plan
    from planner.adapters.slurm.parse import check_document
    from planner.adapters.slurm.run import (
        NO_SNAPSHOT_GPUS,
        NO_STATE_FILE,
        expected_nodes,
        running_gpus,
        save_after_failure,
    )
    from planner.adapters.slurm.state import (
        StateFileError,
        StateLockError,
        load_locked,
    )

    _setup_logging(args.log_level)
    check_output(args.report, "--report")  # (before any command runs)
    inputs = [("PLAN", args.plan), ("--snapshot", args.snapshot), ("--config", args.config)]
    stdin_options(inputs)
    check_inputs_kept(inputs, [("--report", args.report)])
    cfg = _config(args)
    if cfg is None:
        return EXIT_USAGE
    doc = read_document(args.plan)  # InputError -> exit 2
    if not isinstance(doc, dict) or not {"evictions", "placements", "objective"} & set(doc):
        check_document(doc, "plan", args.plan)  # squeue output, a snapshot, ...: say so
    try:
        plan = load_plan(doc)
    except InputError as exc:
        raise InputError(exc.errors, args.plan) from None
    nodes = gpus = None
    if args.snapshot:
        snap = read_document(args.snapshot)
        if not isinstance(snap, dict) or not isinstance(snap.get("jobs"), list):
            raise InputError([("this is not a contract snapshot (no jobs list); give the "
                               "snapshot the plan was made from")], f"--snapshot {args.snapshot}")
        nodes, gpus = expected_nodes(snap), running_gpus(snap)
    with ExitStack() as held:
        try:  # (a `slurm run` or another `slurm apply` holding the lock is refused)
            state = load_locked(held, cfg.state_file, lock=not args.dry_run)
        except (StateLockError, StateFileError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if cfg.state_file is None and not args.dry_run:
            _warn([NO_STATE_FILE])
        elif gpus is None and plan.evictions and not args.dry_run:
            _warn([NO_SNAPSHOT_GPUS])
        # a plan older than max_plan_age_s raises StalePlan (an InputError: exit 2)
        as_json = getattr(args, "format", "table") == "json"
        try:
            if not args.dry_run:
                held.enter_context(sigterm_interrupts())
            report = apply_plan(plan, cfg, dry_run=args.dry_run, state=state,
                                echo=None if as_json else (lambda line: print(line,
                                                                              flush=True)),
                                force=args.force, expected_nodes=nodes, gpus=gpus)
        except BaseException:
            # interrupted (Ctrl-C, SIGTERM) or failed: what it carried out so far
            # (pins, preemption times, evictions) is kept all the same
            if not args.dry_run:
                save_after_failure(state)
            raise
        if not args.dry_run:
            try:
                state.save()
            except StateFileError as exc:
                report.problems.append(str(exc))
    _warn(report.warnings)
    for problem in report.problems:
        print(f"error: {problem}", file=sys.stderr)
    for failed in report.failures:
        print(f"failed (rc {failed.rc}): {failed.text}: {failed.stderr.strip()}",
              file=sys.stderr)
    if args.report:
        write_output(json.dumps(report.to_dict(), indent=1), args.report, "--report")
    if as_json:
        write_output(json.dumps(report.to_dict(), indent=1), None)
    if report.problems and not report.commands:
        return EXIT_USAGE
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_run(args: argparse.Namespace) -> int:
    from planner.adapters.slurm.run import run_loop

    _setup_logging(args.log_level)
    cfg = _config(args)
    if cfg is None:
        return EXIT_USAGE
    if args.plan_dir:
        check_output(args.plan_dir, "--plan-dir", folder=True)
        cfg = cfg.model_copy(update={"plan_dir": Path(args.plan_dir)})
    if args.ticks is not None and args.ticks < 1:
        print("error: --ticks must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if args.interval is not None and not (math.isfinite(args.interval) and args.interval > 0):
        print(f"error: --interval: must be a positive number of seconds, got {args.interval:g}",
              file=sys.stderr)
        return EXIT_USAGE
    from planner.adapters.slurm.parse import tier_mapping_error

    refused = tier_mapping_error(cfg, _config_name(args)) or _tier_policy_error(cfg, args)
    if refused is not None:
        raise refused  # exit 2, before any tick
    echo = (lambda line: print(line, flush=True)) if args.dry_run else None
    return run_loop(cfg, interval_s=args.interval, ticks=args.ticks, dry_run=args.dry_run,
                    echo=echo, plan_dir_name="--plan-dir" if args.plan_dir else "plan_dir")


def main(argv: list[str] | None = None) -> int:
    """``python -m planner.adapters.slurm ...``: the same actions without the main CLI."""
    from models import InputError

    parser = argparse.ArgumentParser(prog="python -m planner.adapters.slurm")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    register(sub)
    args = parser.parse_args(["slurm", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
