"""Helpers shared by the CLI subcommands."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from models import InputError, Snapshot, load_snapshot

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

err_console = Console(stderr=True, highlight=False)


def report_input_error(exc: InputError) -> int:
    """Print every problem of a bad input (no traceback) and return exit status 2."""
    head = f"{exc.source}: " if exc.source else ""
    err_console.print(f"[bold red]error:[/] {head}invalid input ({len(exc.errors)} problem(s))")
    for line in exc.errors:
        err_console.print(f"  - {line}", markup=False, highlight=False, soft_wrap=True)
    return EXIT_USAGE


def warn(message: str) -> None:
    """A warning on stderr (one line, never wrapped)."""
    err_console.print(f"[yellow]warning:[/] {message}", markup=True, highlight=False,
                      soft_wrap=True)


def warn_settings(deterministic: bool, workers: int, option: str = "--workers") -> None:
    """Say when a setting is ignored or beyond the machine (nothing changes)."""
    cores = os.cpu_count() or 1
    if deterministic and workers != 1:
        warn(f"{option} {workers} is ignored with --deterministic, which plans with one "
             "worker")
    elif workers > cores:
        warn(f"{option} {workers} is more than this machine's {cores} core(s); the extra "
             "workers share them and each plan gets slower, not better")


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
    ``folder``), a missing or read-only parent folder."""
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


def add_snapshot_args(p: Any) -> None:
    p.add_argument("snapshot", help="snapshot file (JSON or YAML)")
    p.add_argument("--policy", help="policy file; replaces the snapshot's policy")
