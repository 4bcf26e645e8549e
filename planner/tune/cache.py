"""The cache of simulation results: one JSON file per run, keyed by everything that
decides its outcome (cluster, trace window, load, seed, policy, planner and its
settings, code version), so that a rerun or an extended search runs only what is new.

Files are written by the process that drives the search (never by a worker), each
atomically: an interrupted search leaves complete files only, and resumes from them.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["SimCache", "code_version", "file_digest", "run_key"]

_REPO = Path(__file__).resolve().parents[2]
# what a simulation's outcome does not depend on: the command line, the search itself
_NOT_SIMULATION = ("planner/commands/", "planner/tune/")


@lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of the source that decides a simulation's outcome: every ``.py`` file of
    ``models/`` and ``planner/`` except the command line and the search (a change
    anywhere else makes earlier results stale)."""
    h = hashlib.sha256()
    for root in ("models", "planner"):
        for path in sorted((_REPO / root).rglob("*.py")):
            rel = path.relative_to(_REPO).as_posix()
            if rel.startswith(_NOT_SIMULATION) or "__pycache__" in rel:
                continue
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def file_digest(path: str | Path) -> str:
    """The content digest of a file (a trace or cluster renamed or copied keeps its
    results; one edited in place does not)."""
    st = Path(path).stat()
    return _digest(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def run_key(description: dict[str, Any]) -> str:
    """The cache key of a run described by a JSON-ready dict."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class SimCache:
    """``folder/<key[:2]>/<key>.json``: ``{"run": description, "metrics": ...}``."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # (missing, or unreadable: run it again)

    def put(self, key: str, record: dict[str, Any]) -> None:
        from planner.trap import atomic_write

        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(record, sort_keys=True).encode())
