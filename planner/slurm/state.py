"""What the adapter remembers between ticks (and, with ``state_file``, restarts).

Slurm records how often a job was requeued (``restart_cnt``) but not when it
was last preempted, nor which ``ReqNodeList`` the planner set. The adapter
keeps both: ``preempted[job] = {"at": ISO time the victim stopped, "count":
restart_cnt after the requeue}`` and ``pinned[job] = [nodes]``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class AdapterState:
    preempted: dict[str, dict[str, Any]] = field(default_factory=dict)
    pinned: dict[str, list[str]] = field(default_factory=dict)
    path: Path | None = None

    @classmethod
    def load(cls, path: str | Path | None) -> AdapterState:
        if path is None:
            return cls()
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError:
            return cls(path=p)
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{p}: unreadable adapter state: {exc}") from exc
        return cls(preempted=dict(data.get("preempted", {})),
                   pinned={k: list(v) for k, v in data.get("pinned", {}).items()}, path=p)

    def save(self) -> None:
        """Write atomically (no-op without a path)."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"preempted": self.preempted, "pinned": self.pinned}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def forget_except(self, live_ids: set[str]) -> None:
        """Drop records of jobs Slurm no longer knows."""
        self.preempted = {k: v for k, v in self.preempted.items() if k in live_ids}
        self.pinned = {k: v for k, v in self.pinned.items() if k in live_ids}
