"""``preempt-planner``: the command-line entry point.

Each subcommand lives in ``planner/commands/<name>.py`` and registers itself.

Exit status, for every command: 0 success; 1 the answer is no (``verify``: the plan
breaks a rule); 2 bad input or bad options (the message names the field or option
and the rule; nothing is written); 3 an internal error (one line says what failed;
``--debug`` or ``PREEMPT_PLANNER_DEBUG=1`` shows the traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from models import InputError

EXIT_INTERNAL = 3
EXAMPLES: dict[str, list[str]] = {
    "plan": ["preempt-planner plan instances/example-70b.json",
             "preempt-planner plan snapshot.json -o json --out plan.json --time-limit 2",
             "preempt-planner plan snapshot.json --planner greedy --deterministic"],
    "verify": ["preempt-planner verify snapshot.json plan.json",
               "preempt-planner verify snapshot.json plan.json -o json"],
    "validate": ["preempt-planner validate snapshot.json",
                 "preempt-planner validate policy.yaml --kind policy",
                 "preempt-planner validate snapshot.json -o json"],
    "schema": ["preempt-planner schema --kind snapshot --out snapshot.schema.json",
               "preempt-planner schema --kind all"],
    "show": ["preempt-planner show instances/io-storm.json",
             "preempt-planner show snapshot.json --policy policy.yaml"],
    "generate": ["preempt-planner generate --nodes 256 --pending 100 --seed 1 --out gen.json",
                 "preempt-planner generate --nodes 64 --pools --occupancy 0.95"],
    "whatif": ["preempt-planner whatif snapshot.json --set policy.thrash=null",
               ("preempt-planner whatif snapshot.json --set policy.tiers.2.preempt_after_s=0 "
               "-o json"),
               ("preempt-planner whatif snapshot.json --add-job "
               "'{\"id\": \"big\", \"tier\": 1, \"gpus_per_node\": 8, \"nodes\": 4}'")],
    "simulate": [("preempt-planner simulate --cluster tests/data/sim/cluster-1024.yaml "
                 "--trace philly-2017-09-10.csv --start 2017-10-04 --days 1 --carry-over "
                 "--planner greedy"),
                 ("preempt-planner simulate --cluster cluster.yaml --trace trace.jsonl "
                 "--set thrash.max_fraction=0.05 -o json --result-out run.json")],
    "compare": [("preempt-planner compare --cluster tests/data/sim/cluster-1024.yaml "
                "--trace philly-2017-09-10.csv --start 2017-10-04 --days 1 --carry-over "
                "--planners cpsat,naive --variant no-budget:thrash=null --out report/")],
    "slurm": ["preempt-planner slurm snapshot --config slurm.yaml --out snapshot.json",
              "preempt-planner slurm run --config slurm.yaml --interval 30 --dry-run"],
    "k8s": [("preempt-planner k8s snapshot --nodes nodes.json --pods pods.json --events "
            "events.json --out snapshot.json"),
            ("preempt-planner k8s apply plan.json --snapshot-meta snapshot.json --format kubectl "
            "--out apply.sh")],
    "serve": ["preempt-planner serve --port 8080",
              "preempt-planner serve --host 0.0.0.0 --port 8080 --processes --workers 2"],
}
EPILOG = ("exit status: 0 success, 1 the answer is no (verify: the plan breaks a rule), "
          "2 bad input or options, 3 internal error (--debug shows the traceback)")

COMMANDS = ["plan", "verify", "validate", "schema", "show", "generate", "whatif", "simulate",
            "compare", "slurm", "k8s", "serve"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="preempt-planner",
        description="Constraint-optimization preemption planner for shared GPU clusters.",
        epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an internal error (also "
                             "PREEMPT_PLANNER_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"planner.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"planner.commands.{name}":
                continue  # command not built into this version
            raise
        module.register(sub)
    for name, command in sub.choices.items():  # examples and the exit statuses in --help
        said = "examples:\n" + "\n".join(f"  {x}" for x in EXAMPLES.get(name, []))
        command.epilog = "\n\n".join(x for x in (command.epilog, said, EPILOG) if x)
        command.formatter_class = argparse.RawDescriptionHelpFormatter
        if name in ("slurm", "k8s") and command._subparsers is not None:
            for action in command._subparsers._group_actions:
                for inner in getattr(action, "choices", {}).values():
                    inner.epilog = (f"{inner.epilog}\n\n{EPILOG}" if inner.epilog
                                    else EPILOG)
    return parser


def _suggest(parser: argparse.ArgumentParser, command: str | None, extra: list[str]) -> str:
    """"(did you mean --policy?)" for misspelt options of the command given."""
    import difflib

    def options(p: argparse.ArgumentParser) -> set[str]:
        out = {o for a in p._actions for o in a.option_strings}
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for inner in a.choices.values():
                    out |= options(inner)
        return out

    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    known = options(sub.choices[command]) if sub and command in sub.choices else options(parser)
    hints = []
    for word in extra:
        if word.startswith("--"):
            near = difflib.get_close_matches(word.split("=")[0], sorted(known), n=1, cutoff=0.7)
            if near:
                hints.append(f"{word} -> {near[0]}")
    return f" (did you mean: {', '.join(hints)}?)" if hints else ""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("preempt-planner")
    except PackageNotFoundError:  # (run from a checkout that is not installed)
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    from rich.markup import escape

    from planner.commands._common import err_console, report_input_error

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # (argparse alone would not say which option was meant)
        parser.error("unrecognized arguments: " + " ".join(extra)
                     + _suggest(parser, args.command, extra))
    debug = args.debug or os.environ.get("PREEMPT_PLANNER_DEBUG", "") not in ("", "0")
    try:
        status = args.func(args)
    except InputError as exc:
        status = report_input_error(exc)
    except KeyboardInterrupt:
        status = 130
    except Exception as exc:  # a bug: one line, not a traceback (unless asked for)
        if debug:
            raise
        err_console.print("[bold red]error:[/] " + escape(
            f"internal error in '{args.command}': {type(exc).__name__}: {exc} (a bug; run "
            "again with --debug, or PREEMPT_PLANNER_DEBUG=1, for the traceback)"),
            highlight=False, soft_wrap=True)
        status = EXIT_INTERNAL
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
