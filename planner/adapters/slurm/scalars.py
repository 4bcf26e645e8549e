"""Scalars of Slurm's JSON: numbers in either shape (plain or ``{"set", "infinite",
"number"}``), state flags and times; and signal names (a comment's, a sidecar's or
the config's). Shared by the parser, the config and the adapter's state."""

from __future__ import annotations

import re
import signal as _signal
from datetime import UTC, datetime
from typing import Any


def num(value: Any) -> float | None:
    """A Slurm number in either shape; None when unset or infinite.

    >>> num(5), num({"set": True, "infinite": False, "number": 5}), num({"set": False})
    (5, 5, None)
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
        if value is None or isinstance(value, bool):
            return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        if "_" in value:  # (Python reads "20_7" as 207: Slurm writes no such number)
            return None
        try:
            return float(value)
        except ValueError:
            return None
    return None


def job_id(value: Any) -> int | None:
    """A Slurm job id: a whole number > 0, or a string of ASCII digits only; None
    for anything else (``"20_7"``, an array task as squeue prints it, is not job
    207; ``20.0``, ``True`` and Slurm's number objects are not ids either).

    >>> job_id(20), job_id("20"), job_id("20_7"), job_id(20.0), job_id(True)
    (20, 20, None, None, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        n = int(value)
        return n if n > 0 else None
    return None


def as_int(value: Any, default: int = 0) -> int:
    n = num(value)
    return default if n is None else int(n)


def states_of(value: Any) -> list[str]:
    """Job or node state flags, upper case (``"mixed"`` and ``["MIXED"]`` alike)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    out = []
    for item in items:
        for part in str(item).replace("+", " ").split():
            part = re.sub(r"[^A-Za-z_]", "", part).upper()
            if part:
                out.append(part)
    return out


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> float | None:
    """Epoch seconds from a number, a Slurm number object or an ISO-8601 string."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return dt.timestamp()
    n = num(value)
    return None if n is None or n <= 0 else float(n)


_CATCHABLE = {s.name for s in _signal.Signals} - {"SIGKILL", "SIGSTOP"}


def normalize_signal(value: Any) -> str | None:
    """``TERM``, ``SIGTERM``, ``15`` -> ``SIGTERM``; ``none`` -> None; else ValueError."""
    if value is None:
        return None
    text = str(value).strip()
    if text.lower() in ("", "none", "null", "no", "false"):
        return None
    if text.isdigit():
        try:
            name = _signal.Signals(int(text)).name
        except ValueError as exc:
            raise ValueError(f"unknown signal number {text}") from exc
    else:
        name = text.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
    if name not in _CATCHABLE:
        raise ValueError(f"signal {text!r} is not a catchable signal")
    return name
