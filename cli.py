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
    for name, command in sub.choices.items():  # the exit statuses in every --help
        command.epilog = f"{command.epilog}\n\n{EPILOG}" if command.epilog else EPILOG
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
