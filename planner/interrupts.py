"""SIGTERM as Ctrl-C: how Kubernetes, systemd and Slurm's ``scancel`` stop a process.

Used where a stop must run the same clean-up as Ctrl-C (KeyboardInterrupt): ``slurm
apply`` requeue-holds the victims it signalled and saves its state file, ``serve``
closes its socket and stops its worker processes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt inside the block; the previous handler is put
    back after it. Outside the main thread (where Python cannot set a handler) the
    block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        if previous is not None:  # (None: a handler not set from Python, kept as it is)
            signal.signal(signal.SIGTERM, previous)


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt
