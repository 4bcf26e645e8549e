"""``preempt-planner``: the command-line entry point.

Each subcommand lives in ``planner/commands/<name>.py`` and registers itself.

Exit status, for every command: 0 success; 1 the answer is no (``verify``: the plan
breaks a rule); 2 bad input or bad options (the message names the field or option
and the rule; nothing is written); 3 an internal error (one line says what failed;
``--debug`` or ``PREEMPT_PLANNER_DEBUG=1`` shows the traceback); 130 interrupted.
Standard output that cannot be written (a full disk, closed by the caller) is
status 2 with a one-line error; when its reader goes away (``| head``) the output
stops quietly, status 141 (128 + SIGPIPE, as a command killed by SIGPIPE).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import importlib
import logging
import os
import sys
from typing import Any, NoReturn

from models import InputError

EXIT_INTERNAL = 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of standard output went away
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
    "compare": [("preempt-planner compare --cluster tests/data/sim/cluster-1node.json "
                 "--trace tests/data/sim/ping-pong.jsonl --planners cpsat,greedy,naive "
                 "--deterministic --out report/"),
                ("preempt-planner compare --cluster tests/data/sim/cluster-1024.yaml "
                 "--trace philly-2017-09-10.csv --start 2017-10-04 --days 1 --carry-over "
                 "--planners cpsat,naive --variant no-budget:thrash=null --out report/"),
                ("preempt-planner compare --cluster cluster.yaml --trace trace.jsonl "
                 "--policies strict.yaml,lenient.yaml --planners cpsat --jobs 2 -o json")],
    "tune": [("preempt-planner tune --cluster tests/data/tune/cluster-56.yaml --trace "
              "tests/data/tune/burst.jsonl --space tests/data/tune/budget-space.yaml --planner "
              "greedy --days 0.5 --objective thrash,t2_p95 --constraint thrash<=0 --out tuned/"),
             ("preempt-planner tune --cluster tests/data/sim/cluster-1024.yaml --trace "
              "philly-2017-09-10.csv --space space.yaml --windows 2017-10-04,2017-10-11 --days 2 "
              "--carry-over --loads 1,2 --seeds 0,1 --trials 40 --constraint t1_p95<=1.1*naive "
              "--out tuned/"),
             ("preempt-planner tune --cluster cluster.yaml --trace trace.jsonl --space space.yaml "
              "--ray 10.0.0.5:6379 --cache shared-cache/ --out tuned/ -o json")],
    "slurm": ["preempt-planner slurm snapshot --config slurm.yaml --out snapshot.json",
              "preempt-planner slurm apply plan.json --config slurm.yaml --dry-run",
              "preempt-planner slurm run --config slurm.yaml --interval 30 --dry-run"],
    "slurm snapshot": [
        "preempt-planner slurm snapshot --config slurm.yaml --out snapshot.json",
        ("preempt-planner slurm snapshot --config slurm.yaml --squeue-json squeue.json "
         "--nodes-json sinfo.json --now 2026-11-29T08:00:00Z"),
        "preempt-planner slurm snapshot --default-tier 3 --quiet > snapshot.json"],
    "slurm apply": [
        "preempt-planner slurm apply plan.json --config slurm.yaml --dry-run",
        ("preempt-planner slurm apply plan.json --config slurm.yaml --snapshot snapshot.json "
         "--report report.json"),
        "preempt-planner slurm apply plan.json --config slurm.yaml -o json"],
    "slurm run": [
        "preempt-planner slurm run --config slurm.yaml --interval 30 --dry-run",
        "preempt-planner slurm run --config slurm.yaml --ticks 10 --plan-dir ticks/",
        "preempt-planner slurm run --config slurm.yaml --log-format json"],
    "k8s": [("preempt-planner k8s snapshot --nodes nodes.json --pods pods.json --events "
             "events.json --out snapshot.json"),
            ("preempt-planner k8s apply plan.json --snapshot-meta snapshot.json --emit kubectl "
             "--out apply.sh")],
    "k8s snapshot": [
        ("preempt-planner k8s snapshot --nodes nodes.json --pods pods.json --config k8s.yaml "
         "--out snapshot.json"),
        ("kubectl get pods -A -o json | preempt-planner k8s snapshot --nodes nodes.json "
         "--pods - --default-tier 3"),
        ("preempt-planner k8s snapshot --nodes nodes.json --pods pods.json --events "
         "events.json --meta-out meta.json --out snapshot.json")],
    "k8s apply": [
        "preempt-planner k8s apply plan.json --snapshot-meta snapshot.json --out evictions.json",
        ("preempt-planner k8s apply plan.json --snapshot-meta snapshot.json --emit kubectl "
         "--out apply.sh"),
        "preempt-planner plan snapshot.json -o json | preempt-planner k8s apply - --no-bindings"],
    "serve": ["preempt-planner serve --port 8080",
              "preempt-planner serve --host 0.0.0.0 --port 8080 --processes --workers 2",
              "preempt-planner serve --port 8080 --quiet --log-format json"],
    "completion": [("preempt-planner completion bash > ~/.local/share/bash-completion/"
                   "completions/preempt-planner"),
                   "preempt-planner completion zsh > \"${fpath[1]}/_preempt-planner\""],
}
EPILOG = ("exit status: 0 success, 1 the answer is no (verify: the plan breaks a rule; slurm: "
          "a Slurm command failed), 2 bad input or options, 3 internal error (--debug shows "
          "the traceback)")

COMMANDS = ["plan", "verify", "validate", "schema", "show", "generate", "whatif", "simulate",
            "compare", "tune", "slurm", "k8s", "serve", "completion"]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="preempt-planner",
        description="Constraint-optimization preemption planner for shared GPU clusters.",
        epilog=EPILOG)
    _add_common(parser, top=True)
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
        command.epilog = "\n\n".join(x for x in (command.epilog, _examples(name), EPILOG) if x)
        command.formatter_class = argparse.RawDescriptionHelpFormatter
        for inner_name, inner in _actions_of(command).items():
            inner.epilog = "\n\n".join(
                x for x in (inner.epilog, _examples(f"{name} {inner_name}"), EPILOG) if x)
            inner.formatter_class = argparse.RawDescriptionHelpFormatter
    for p in _parsers(parser):
        _plain_text(p)
        if p is not parser:
            _add_common(p)
    return parser


def _examples(name: str) -> str:
    said = EXAMPLES.get(name, [])
    return "examples:\n" + "\n".join(f"  {x}" for x in said) if said else ""


COMMON_OPTIONS = (  # (option, help): the same in every command's --help and the README
    ("--quiet", "no warnings, notes or progress on stderr (errors always print)"),
    ("--log-level", ("DEBUG, INFO, WARNING or ERROR: the least important log record shown "
                     "(default WARNING; INFO for slurm and serve)")),
    ("--log-format", "text (default) or json: one JSON object per log record"),
    ("--debug", "show the traceback of an internal error (also PREEMPT_PLANNER_DEBUG=1)"),
    ("--version", "print the version and exit"),
)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _actions_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A command's own sub-commands (slurm snapshot, k8s apply, ...) by name."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: p for a in subs for name, p in a.choices.items()}


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and every parser under it."""
    return [parser] + [q for p in _actions_of(parser).values() for q in _parsers(p)]


def _plain_text(parser: argparse.ArgumentParser) -> None:
    """--help is plain text: ``double`` or `single` backticks of docstrings become
    'quotes'."""
    def plain(text: str | None) -> str | None:
        return text.replace("``", "'").replace("`", "'") if text else text

    parser.description = plain(parser.description)
    parser.epilog = plain(parser.epilog)
    for action in parser._actions:
        action.help = plain(action.help)


def _add_common(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """The common options, the same on every command (and before the command): an
    option of the same name that a command defined itself is replaced. Their
    defaults are left out of the namespace (so that a value given before the
    command is kept) and filled in by :func:`_resolve_common`."""
    helps = dict(COMMON_OPTIONS)
    parser.conflict_handler = "resolve"
    group = parser.add_argument_group("common options")
    none = argparse.SUPPRESS
    group.add_argument("--quiet", action="store_true", default=none, help=helps["--quiet"])
    group.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=none,
                       metavar="LEVEL", help=helps["--log-level"])
    group.add_argument("--log-format", choices=("text", "json"), default=none,
                       help=helps["--log-format"])
    group.add_argument("--debug", action="store_true", default=none, help=helps["--debug"])
    group.add_argument("--version", action="version", version=f"preempt-planner {_version()}",
                       help=helps["--version"])
    parser.conflict_handler = "error"
    if top:
        return
    # (a command's own --quiet or --log-level is gone: drop its empty group titles)
    parser._action_groups = [g for g in parser._action_groups
                             if g._group_actions or g.title in ("positional arguments",
                                                                "options")]


def _resolve_common(args: argparse.Namespace) -> None:
    """Fill in the common options not given: --log-level defaults to WARNING (INFO
    for slurm and serve, which log what they do), and --quiet without --log-level
    shows errors only."""
    args.quiet = bool(getattr(args, "quiet", False))
    args.debug = bool(getattr(args, "debug", False)) or \
        os.environ.get("PREEMPT_PLANNER_DEBUG", "") not in ("", "0")
    args.log_format = getattr(args, "log_format", "text")
    if getattr(args, "log_level", None) is None:
        chatty = getattr(args, "command", None) in ("slurm", "serve")
        args.log_level = "ERROR" if args.quiet else "INFO" if chatty else "WARNING"


class _JsonLog(logging.Formatter):
    """--log-format json: one JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        import json

        out = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "level": record.levelname,
               "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


class _Stderr(logging.StreamHandler):
    """A handler writing to the current sys.stderr (which tests replace)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def _setup_output(args: argparse.Namespace) -> None:
    """--quiet, --log-level and --log-format, for every command."""
    from planner.commands._common import set_quiet

    set_quiet(args.quiet)
    handler = _Stderr()
    handler.setFormatter(_JsonLog() if args.log_format == "json"
                         else logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Stderr)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(args.log_level)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose "invalid choice" errors suggest the nearest choice
    (a misspelt command, action or format)."""

    def error(self, message: str) -> NoReturn:
        import difflib
        import re

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2))
            near = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
            if near:
                message += f" (did you mean {near[0]!r}?)"
        super().error(message)


def _leaf(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command (and action) given."""
    for dest in ("command", "slurm_command", "k8s_command"):
        name = getattr(args, dest, None)
        inner = _actions_of(parser).get(name) if name else None
        if inner is not None:
            parser = inner
    return parser


def _suggest(parser: argparse.ArgumentParser, args: argparse.Namespace,
             extra: list[str]) -> str:
    """"(did you mean --policy?)" for misspelt options of the command given."""
    import difflib

    known = {o for a in _leaf(parser, args)._actions for o in a.option_strings}
    hints = []
    for word in extra:
        if word.startswith("--") and word.split("=")[0] not in known:
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


class _OutputLost(BaseException):
    """Standard output could not be written: the OSError (a full disk, a closed
    descriptor, EPIPE when its reader went away). A BaseException, as SystemExit is:
    it ends the command, and no ``except Exception`` on the way (a loop's failed
    tick, argparse's OSError around --help) may take it for the work's own error."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(exc.strerror or str(exc))
        self.exc = exc


class _Guarded:
    """sys.stdout or sys.stderr of the console script, whose failed writes are
    decided here, not by whichever code wrote: on standard output an OSError
    becomes _OutputLost (main reports it: a full disk is an error, a reader gone
    away a quiet exit); on standard error it is dropped (an error about it would
    have nowhere to go, and rich would end the process on EPIPE)."""

    def __init__(self, stream: Any, *, drop: bool) -> None:
        self._stream = stream
        self._drop = drop

    def _failed(self, exc: OSError) -> None:
        if not self._drop:
            raise _OutputLost(exc) from None

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except OSError as exc:
            self._failed(exc)
            return 0

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            self._failed(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _standard_streams() -> None:
    """Standard input, output and error as the console script needs them. One the
    caller closed (``<&-``, ``>&-``, ``2>&-``: a cron job, a daemon) gets /dev/null
    on its descriptor, so that no file opened later (the --out file) becomes
    descriptor 0, 1 or 2 and receives what is meant for them: standard input then
    reads nothing (and ``-`` is refused naming the argument, see stdin_options),
    standard output is /dev/null opened for reading, so that a write fails (an
    error, not output lost in silence), and standard error discards. Standard
    output and error are then _Guarded."""
    from planner.commands._common import set_closed

    closed = []
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
            closed.append(False)
            continue
        except OSError:
            closed.append(True)
        new = os.open(os.devnull, flags)
        if new != fd:
            os.dup2(new, fd)
            os.close(new)
    if closed[0] or sys.stdin is None:
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        set_closed(stdin=True)
    if closed[1] or sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        set_closed(stdout=True)
    if closed[2] or sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    if not isinstance(sys.stdout, _Guarded):
        sys.stdout = _Guarded(sys.stdout, drop=False)
    if not isinstance(sys.stderr, _Guarded):
        sys.stderr = _Guarded(sys.stderr, drop=True)


def _output_lost(lost: _OutputLost, args: argparse.Namespace | None) -> int:
    """Standard output could not be written: quietly status 141 when its reader went
    away (``| head``), else a one-line error and status 2 (an output that cannot be
    written, as for --out). Either way what is left in its buffer goes to /dev/null,
    so that no flush at exit fails again."""
    from planner.commands._common import EXIT_USAGE, error, stdout_closed

    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    if lost.exc.errno == errno.EPIPE:
        return EXIT_BROKEN_PIPE
    why = lost.exc.strerror or str(lost.exc)
    if stdout_closed():
        why = "it is closed"
        if args is not None and hasattr(args, "out") and not args.out:
            why += "; write the output to a file with --out FILE"
    error(f"cannot write the output to standard output: {why}")
    return EXIT_USAGE


# commands after which the console script exits without freeing every object: a
# 12,500-node snapshot and its plan take about 1 s to free at exit, and these start
# no process pools, Ray or servers that need their exit handlers
FAST_EXIT = frozenset({"plan", "verify", "validate"})
_ran: list[str] = []  # the command main() ran last


def entry() -> None:
    """The console script: :func:`main`, then ``sys.exit``, or, after a command of
    FAST_EXIT, its output flushed and logging shut down, ``os._exit``. Standard
    streams closed by the caller, or that cannot be written, are handled (see
    _standard_streams)."""
    _standard_streams()
    if len(sys.argv) > 1 and sys.argv[1] in FAST_EXIT:
        # one snapshot read, planned or checked, then os._exit: the cyclic garbage
        # collector would only walk the snapshot's objects (a full collection when
        # loading ends takes 0.14 s at 12,500 nodes), which hold no cycles to free
        gc.disable()
    status = main()
    if not (_ran and _ran[-1] in FAST_EXIT):
        sys.exit(status)
    import multiprocessing

    for child in multiprocessing.active_children():  # (a lane left by an error)
        child.kill()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, _OutputLost):  # (a reader gone away, a closed stream)
            pass
    os._exit(status)


def main(argv: list[str] | None = None) -> int:
    from planner.commands._common import error, report_input_error

    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
    except _OutputLost as lost:  # (--help or --version into a full or closed output)
        return _output_lost(lost, None)
    except SystemExit:  # --help, --version: what they printed is flushed here, where a
        try:  # failure is reported, not at the interpreter's exit (status 120)
            sys.stdout.flush()
        except _OutputLost as lost:
            return _output_lost(lost, None)
        raise
    _ran.append(str(getattr(args, "command", "")))
    if extra:  # (argparse alone would not say which option was meant)
        _leaf(parser, args).error("unrecognized arguments: " + " ".join(extra)
                                  + _suggest(parser, args, extra))
    _resolve_common(args)
    _setup_output(args)
    try:
        status = args.func(args)
    except InputError as exc:
        status = report_input_error(exc)
    except _OutputLost as lost:
        status = _output_lost(lost, args)
    except KeyboardInterrupt:
        status = 130
    except Exception as exc:  # a bug: one line, not a traceback (unless asked for)
        if args.debug:
            raise
        error(f"internal error in '{args.command}': {type(exc).__name__}: {exc} (a bug; run "
              "again with --debug, or PREEMPT_PLANNER_DEBUG=1, for the traceback)")
        status = EXIT_INTERNAL
    try:
        sys.stdout.flush()  # (here, where a failure is reported, not at exit)
    except _OutputLost as lost:  # (and standard output goes to /dev/null from here on)
        lost_status = _output_lost(lost, args)
        status = status or lost_status
    return int(status or 0)


if __name__ == "__main__":
    entry()
