"""What the adapter remembers between ticks (and, with ``state_file``, restarts).

Slurm records how often a job was requeued (``restart_cnt``) but not when it
was last preempted, nor which ``ReqNodeList`` the planner set, nor the evictions
of the last hour that the rolling eviction budget (R15) counts. The adapter
keeps them: ``preempted[job] = {"at": ISO time the victim stopped, "count":
restart_cnt after the requeue}``, ``pinned[job] = [nodes]`` and ``evictions =
[{"job", "at", "gpus"}]`` (the evictions it carried out, as the snapshot's
``recent_evictions``, for ``EVICTIONS_KEPT_S``).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.adapters.slurm.scalars import parse_time

EVICTIONS_KEPT_S = 86400.0  # a day: longer than any sensible thrash.window_s


@dataclass
class AdapterState:
    preempted: dict[str, dict[str, Any]] = field(default_factory=dict)
    pinned: dict[str, list[str]] = field(default_factory=dict)
    evictions: list[dict[str, Any]] = field(default_factory=list)
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
        evictions = data.get("evictions", [])
        if not isinstance(evictions, list) or not all(
                isinstance(e, dict) and isinstance(e.get("job"), str) and e.get("at")
                for e in evictions):
            raise ValueError(f"{p}: unreadable adapter state: evictions must be a list of "
                             '{"job": ..., "at": ...} records')
        return cls(preempted=dict(data.get("preempted", {})),
                   pinned={k: list(v) for k, v in data.get("pinned", {}).items()},
                   evictions=[dict(e) for e in evictions], path=p)

    def save(self) -> None:
        """Write atomically (no-op without a path)."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"preempted": self.preempted, "pinned": self.pinned, "evictions": self.evictions}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def forget_except(self, live_ids: set[str]) -> None:
        """Drop records of jobs Slurm no longer knows (evictions stay: R15 counts
        them whether or not their job is still known)."""
        self.preempted = {k: v for k, v in self.preempted.items() if k in live_ids}
        self.pinned = {k: v for k, v in self.pinned.items() if k in live_ids}

    def record_eviction(self, job: str, at: str, gpus: int | None = None) -> None:
        self.evictions.append({"job": job, "at": at} | ({"gpus": gpus} if gpus else {}))

    def recent_evictions(self, now: float, keep_s: float = EVICTIONS_KEPT_S
                         ) -> list[dict[str, Any]]:
        """The evictions of the last ``keep_s`` seconds before ``now`` (epoch), oldest
        first; older ones are forgotten."""
        kept = [e for e in self.evictions
                if (t := parse_time(e["at"])) is not None and now - keep_s <= t]
        self.evictions = kept
        return [dict(e) for e in sorted(kept, key=lambda e: parse_time(e["at"]) or 0.0)
                if (parse_time(e["at"]) or 0.0) <= now]
