"""Helpers shared by the CLI subcommands."""

from __future__ import annotations

import contextlib
import io
import math
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from models import InputError, Snapshot, load_snapshot

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

# standard error: messages are never hard-wrapped (soft_wrap), so that grep finds them
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
PIPE_WIDTH = 100_000  # stdout that is not a terminal: tables as wide as their content


class _Output:
    quiet = False  # --quiet: no warnings, notes or progress (errors always print)
    stdin_closed = False  # closed by the caller (``<&-``), seen by cli.entry
    stdout_closed = False  # (``>&-``)


def set_closed(*, stdin: bool = False, stdout: bool = False) -> None:
    """Standard input or output was closed when the process started (cli.entry):
    ``-`` is then refused naming the argument (stdin_options); a summary shown next
    to an --out file is left out (stdout_closed)."""
    _Output.stdin_closed = _Output.stdin_closed or stdin
    _Output.stdout_closed = _Output.stdout_closed or stdout


def stdout_closed() -> bool:
    """Standard output was closed by the caller (``>&-``): a command whose result
    went to --out leaves out what it would show there (writing it would fail)."""
    return _Output.stdout_closed


def set_quiet(quiet: bool) -> None:
    """--quiet, for every command (cli.main)."""
    _Output.quiet = quiet


def is_quiet() -> bool:
    return _Output.quiet


def error(message: str) -> None:
    """An error on stderr, always (also with --quiet); one line, never wrapped."""
    err_console.print(f"[bold red]error:[/] {escape(message)}")


def report_input_error(exc: InputError) -> int:
    """Print every problem of a bad input (no traceback) and return exit status 2."""
    head = f"{exc.source}: " if exc.source else ""
    error(f"{head}invalid input ({len(exc.errors)} problem(s))")
    for line in exc.errors:
        err_console.print(f"  - {line}", markup=False)
    return EXIT_USAGE


def warn(message: str) -> None:
    """A warning on stderr (one line, never wrapped); none with --quiet."""
    if not _Output.quiet:
        err_console.print(f"[yellow]warning:[/] {escape(message)}")


def note(message: str) -> None:
    """A note on stderr (where a report went, what was skipped); none with --quiet."""
    if not _Output.quiet:
        err_console.print(message, markup=False)


def progress_wanted(no_progress: bool = False) -> bool:
    """Progress on stderr: only on a terminal, and not with --quiet or --no-progress."""
    return err_console.is_terminal and not _Output.quiet and not no_progress


def out_console(file: Any = None, *, record: bool = False) -> Console:
    """A console for results on stdout (or ``file``): the terminal's width on a
    terminal; else wide enough that nothing wraps (a table is as wide as its content,
    a line as long as its text), for pipes, logs and files."""
    if file is None and sys.stdout.isatty():
        return Console(highlight=False, record=record)
    return Console(file=file, width=PIPE_WIDTH, highlight=False, record=record)


class PlainTable(Table):
    """A table whose text cells are shown as they are: ids, node names and details
    come from the user's files, and '[/]' or '[bold]' in them is text, not rich
    markup (markup there was an internal error), nor is a trailing backslash doubled
    or ':smile:' an emoji. Styled cells are rich Text."""

    def add_row(self, *renderables: Any, **options: Any) -> None:
        super().add_row(*(Text(r) if isinstance(r, str) else r for r in renderables),
                        **options)


def titled_table(title: str, **options: Any) -> Table:
    """A table with its title on the left, at least as wide as the title (a table sized
    to its content must not wrap its title)."""
    return PlainTable(title=escape(title), title_justify="left", min_width=len(title),
                      **options)


def print_table(renderable: Any, out: str | None = None) -> None:
    """A table (or any rich renderable) on stdout, or as plain text into ``--out``."""
    if not out:
        out_console().print(renderable)
        return
    con = out_console(io.StringIO(), record=True)
    con.print(renderable)
    write_output(con.export_text(), out)


def stdin_options(given: list[tuple[str, Any]]) -> list[str]:
    """Which of the (option, value) pairs read standard input (``-``, or ``@-`` for
    --add-job); InputError when more than one does."""
    named = [option for option, value in given if value in ("-", "@-")]
    if len(named) > 1:
        raise InputError([(f"{', '.join(named)}: only one file can be read from standard "
                           "input (-)")])
    if named and _Output.stdin_closed:
        raise InputError([(f"{named[0]} -: standard input is closed (nothing can be read "
                           "from it); give a file")])
    return named


def stdin_to_file(option: str) -> str:
    """Standard input copied into a temporary file (removed at exit), for readers that
    take a path or read it again in another process; its name is returned."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="preempt-planner-")
    atexit.register(shutil.rmtree, folder, True)
    path = Path(folder) / "standard-input"
    data = sys.stdin.buffer.read()
    if not data.strip():
        raise InputError([f"{option} -: standard input is empty"])
    path.write_bytes(data)
    return str(path)


def warn_settings(deterministic: bool, workers: int | None, option: str = "--workers") -> int:
    """Say when a setting the user gave is ignored or beyond the machine (nothing
    changes); ``workers`` is None when not given. Returns the workers to use (2 by
    default)."""
    cores = os.cpu_count() or 1
    if workers is None:
        return 2
    if workers < 1:  # (bad input: the range check says so)
        return workers
    if deterministic and workers != 1:
        warn(f"{option} {workers} is ignored with --deterministic, which plans with one "
             "worker")
    elif workers > cores:
        warn(f"{option} {workers} is more than this machine's {cores} core(s); the extra "
             "workers share them and each plan gets slower, not better")
    return workers


def load_snapshot_arg(path: str, policy: str | None = None) -> Snapshot:
    """Load the snapshot named on the command line (raises InputError)."""
    return load_snapshot(Path(path), policy=Path(policy) if policy else None)


def check_time_limit(value: float, option: str = "--time-limit") -> None:
    """A planner time limit: a positive, finite number of seconds (InputError)."""
    if not (math.isfinite(value) and value > 0):
        raise InputError([f"{option}: must be a positive number of seconds, got {value:g}"])


def check_output(path: str | None, option: str, *, folder: bool = False) -> None:
    """Refuse, before any work, an output path that cannot be written (InputError,
    exit status 2): a folder where a file is meant (or a file where a folder is, with
    ``folder``), a missing or read-only parent folder, a folder where nothing can be
    made (tried: see _try_writing)."""
    if not path:
        return
    p = Path(path)
    if not folder and p.is_dir():
        raise InputError([f"{option}: {path} is a folder; give a file name"])
    if folder and p.exists() and not p.is_dir():
        raise InputError([f"{option}: {path} is a file; give a folder"])
    where = p if folder and p.is_dir() else p.parent  # the folder written into
    while folder and not where.exists() and where != where.parent:
        where = where.parent  # (a new folder is created with its parents)
    if not where.is_dir():
        raise InputError([f"{option}: folder {where} does not exist"])
    if not os.access(where, os.W_OK | os.X_OK):
        raise InputError([f"{option}: folder {where} is not writable"])
    if not folder and _special(path):
        return  # (a device or a FIFO is written into: its access says it all)
    _try_writing(p if folder else Path(os.path.realpath(p)).parent, option, folder)


def check_inputs_kept(inputs: list[tuple[str, Any]], outputs: list[tuple[str, Any]], *,
                      folder: bool = False) -> None:
    """Refuse, before any work, an output that is one of the command's own input files
    (InputError, exit status 2): writing it would replace the input. ``inputs`` and
    ``outputs`` are (option, path) pairs; None, ``-`` and texts that are no file
    (--add-job JSON) are skipped; ``@file`` is the file. Two paths are the same when
    they are one file (os.path.samefile: ./a.json, a link to it), or, for outputs not
    made yet, the same real path (two outputs named alike). With ``folder`` the
    outputs are the files a command writes in its output folder."""
    def path_of(value: Any) -> str | None:
        if value is None or str(value) in ("", "-", "@-"):
            return None
        text = str(value)
        return text.removeprefix("@")

    def same(a: str, b: str) -> bool:
        try:
            if os.path.exists(a) and os.path.exists(b):
                return os.path.samefile(a, b)
            return os.path.realpath(a) == os.path.realpath(b)
        except (OSError, ValueError):  # (a name too long or with a NUL: no file)
            return False

    seen: list[tuple[str, str]] = []
    for option, value in outputs:
        out = path_of(value)
        if out is None:
            continue
        for in_option, in_value in inputs:
            given = path_of(in_value)
            if given is not None and os.path.isfile(given) and os.path.exists(out) \
                    and same(out, given):
                also = "" if given == out else f" ({given})"
                if folder:
                    where = os.path.dirname(out) or "."
                    raise InputError([(f"{option}: {where} would get {os.path.basename(out)}, "
                                       f"which is the input file {in_option}{also}; give "
                                       "another folder (it would replace the input)")])
                raise InputError([(f"{option}: {out} is the input file {in_option}{also}; "
                                   "write the output to another file (it would replace the "
                                   "input)")])
        for other_option, other in seen:
            if same(out, other) and not _special(out):  # (a device takes both: /dev/null)
                raise InputError([(f"{option}: {out} is also the file of {other_option}; "
                                   "give each output its own file")])
        seen.append((option, out))


def _special(path: str) -> bool:
    """Is ``path`` something other than a regular file (a device, a FIFO)?"""
    return os.path.exists(path) and not os.path.isfile(path)


def _try_writing(folder: Path, option: str, create: bool) -> None:
    """Make the folder (when ``create``, with its missing parents) and a file in it,
    then remove both again: what os.access cannot tell (as root it says yes to
    /proc, where nothing can be made) is found before the work, not after it.
    InputError naming ``option``."""
    import tempfile

    made: list[Path] = []
    try:
        for d in [*reversed(folder.parents), folder]:  # (outermost first)
            if create and not d.exists():
                try:
                    d.mkdir()
                except OSError as exc:
                    raise InputError([(f"{option}: cannot create folder {d}: "
                                       f"{exc.strerror or exc}")]) from None
                made.append(d)
        try:
            fd, name = tempfile.mkstemp(prefix=".preempt-planner-probe-", dir=folder)
            os.close(fd)
            os.unlink(name)
        except OSError as exc:
            raise InputError([(f"{option}: cannot write in folder {folder}: "
                               f"{exc.strerror or exc}")]) from None
    finally:
        for d in reversed(made):  # (innermost first)
            with contextlib.suppress(OSError):
                d.rmdir()


def write_file(text: str, path: str | Path, option: str = "--out") -> None:
    """Write ``text`` to ``path`` atomically (the file is untouched or complete, even
    if the process dies); an OSError becomes an InputError naming the option."""
    from planner.trap import atomic_write

    try:
        atomic_write(path, (text if text.endswith("\n") else text + "\n").encode())
    except OSError as exc:
        raise InputError([f"{option}: cannot write {path}: {exc.strerror or exc}"]) from None


def write_output(text: str, out: str | None, option: str = "--out") -> None:
    """Write to ``--out FILE`` atomically (nothing half-written), else stdout."""
    if not out:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    write_file(text, out, option)


def add_json_format(p: Any, what: str) -> None:
    """``-o/--format json`` on a command whose result is always JSON (the option is
    there so that every command that prints a result takes ``-o json``)."""
    p.add_argument("-o", "--format", choices=["json"], default="json",
                   help=f"json: {what} (the only format)")


def add_snapshot_args(p: Any) -> None:
    p.add_argument("snapshot", help="snapshot file (JSON or YAML; - reads standard input)")
    p.add_argument("--policy", help="policy file; replaces the snapshot's policy")
