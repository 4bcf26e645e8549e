"""``preempt-planner``: the command-line entry point.

Each subcommand lives in ``planner/commands/<name>.py`` and registers itself.
Bad input is reported with the field path and rule and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from models import InputError

COMMANDS = ["plan", "verify", "validate", "schema", "show", "generate", "whatif", "simulate",
            "compare", "slurm", "k8s", "serve"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="preempt-planner",
        description="Constraint-optimization preemption planner for shared GPU clusters.")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    from planner.commands._common import report_input_error

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = args.func(args)
    except InputError as exc:
        status = report_input_error(exc)
    except KeyboardInterrupt:
        status = 130
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
