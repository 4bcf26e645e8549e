"""Helpers shared by the CLI subcommands."""

from __future__ import annotations

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


def load_snapshot_arg(path: str, policy: str | None = None) -> Snapshot:
    """Load the snapshot named on the command line (raises InputError)."""
    return load_snapshot(Path(path), policy=Path(policy) if policy else None)


def write_output(text: str, out: str | None) -> None:
    """Write to ``--out FILE`` atomically (nothing half-written), else stdout."""
    if not out:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    target = Path(out)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(text if text.endswith("\n") else text + "\n")
    tmp.replace(target)


def add_snapshot_args(p: Any) -> None:
    p.add_argument("snapshot", help="snapshot file (JSON or YAML)")
    p.add_argument("--policy", help="policy file; replaces the snapshot's policy")
