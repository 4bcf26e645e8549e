"""What the adapter remembers between ticks (and, with ``state_file``, restarts).

Slurm records how often a job was requeued (``restart_cnt``) but not when it
was last preempted, nor which ``ReqNodeList`` the planner set, nor the evictions
of the last hour that the rolling eviction budget (R15) counts. The adapter
keeps them: ``preempted[job] = {"at": ISO time the victim stopped, "count":
restart_cnt after the requeue}``, ``pinned[job] = [nodes]`` and ``evictions =
[{"job", "at", "gpus"}]`` (the evictions it carried out, as the snapshot's
``recent_evictions``, for ``EVICTIONS_KEPT_S``).

The file is written atomically and durably (:func:`planner.trap.atomic_write`:
fsync of the file and of its directory). A file that is not such a document is
refused with :class:`StateFileError` naming the file and what is wrong.
:func:`state_lock` is the exclusive lock (``<state_file>.lock``) that one
``slurm run`` holds for its life and ``slurm apply`` around its load, apply and
save, so that two of them never act on the cluster and write the file at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.adapters.slurm.scalars import iso, parse_time

EVICTIONS_KEPT_S = 86400.0  # a day: longer than any sensible thrash.window_s


class StateFileError(ValueError):
    """The state file cannot be read, has the wrong shape, or cannot be written."""


class StateLockError(ValueError):
    """Another ``slurm run`` or ``slurm apply`` holds the state file's lock (or the
    lock file cannot be opened)."""


def _type(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a boolean", dict: "an object", type(None): "null"
            }.get(type(value), type(value).__name__)


def _shape_problems(data: Any) -> list[str]:
    """What is wrong with a state document (one message per problem, at most a few)."""
    if not isinstance(data, dict):
        return [(f"it holds {_type(data)}, not a JSON object with preempted, pinned and "
                 "evictions")]
    out: list[str] = []
    preempted = data.get("preempted", {})
    if not isinstance(preempted, dict):
        out.append(f"preempted must be an object (job -> record), not {_type(preempted)}")
    else:
        for job, rec in preempted.items():
            if not isinstance(rec, dict):
                out.append(f'preempted["{job}"] must be an object {{"at": time, "count": n}}, '
                           f"not {_type(rec)}")
            elif "at" in rec and not (isinstance(rec["at"], str) and parse_time(rec["at"])):
                out.append(f'preempted["{job}"].at must be an ISO-8601 time, not {rec["at"]!r}')
            elif "count" in rec and not (type(rec["count"]) is int and rec["count"] >= 0):
                out.append(f'preempted["{job}"].count must be a whole number >= 0, not '
                           f'{rec["count"]!r}')
    pinned = data.get("pinned", {})
    if not isinstance(pinned, dict):
        out.append(f"pinned must be an object (job -> list of nodes), not {_type(pinned)}")
    else:
        for job, nodes in pinned.items():
            if not (isinstance(nodes, list) and all(isinstance(n, str) for n in nodes)):
                out.append(f'pinned["{job}"] must be a list of node names (strings), not '
                           f"{json.dumps(nodes)[:60]}")
    evictions = data.get("evictions", [])
    if not isinstance(evictions, list) or not all(
            isinstance(e, dict) and isinstance(e.get("job"), str)
            and isinstance(e.get("at"), str) and parse_time(e["at"]) is not None
            and (e.get("gpus") is None or (type(e["gpus"]) is int and e["gpus"] >= 0))
            for e in evictions):
        out.append('evictions must be a list of {"job": id, "at": ISO-8601 time, "gpus": n} '
                   "records")
    return out[:5]


@dataclass
class AdapterState:
    preempted: dict[str, dict[str, Any]] = field(default_factory=dict)
    pinned: dict[str, list[str]] = field(default_factory=dict)
    evictions: list[dict[str, Any]] = field(default_factory=list)
    path: Path | None = None

    @classmethod
    def load(cls, path: str | Path | None) -> AdapterState:
        """The state in `path` (empty when there is no such file yet); raises
        :class:`StateFileError` naming the file and what is wrong with it."""
        if path is None:
            return cls()
        p = Path(path)
        try:
            text = p.read_text()
        except FileNotFoundError:
            return cls(path=p)
        except (OSError, UnicodeDecodeError) as exc:
            raise _bad(p, f"cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
        if not text.strip():
            raise _bad(p, "it is empty (a JSON object was expected)")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _bad(p, f"it is not valid JSON ({exc.msg} at line {exc.lineno} column "
                          f"{exc.colno})") from None
        except RecursionError:
            raise _bad(p, "it is not valid JSON (nested too deep)") from None
        except ValueError:  # (Python's limit on the digits of an integer)
            raise _bad(p, "it is not valid JSON (a number has more than 4,300 digits)") \
                from None
        problems = _shape_problems(data)
        if problems:
            raise _bad(p, "; ".join(problems))
        return cls(preempted={str(k): dict(v) for k, v in data.get("preempted", {}).items()},
                   pinned={str(k): list(v) for k, v in data.get("pinned", {}).items()},
                   evictions=[dict(e) for e in data.get("evictions", [])], path=p)

    def save(self) -> None:
        """Write atomically and durably (no-op without a path); raises
        :class:`StateFileError` when the file cannot be written."""
        if self.path is None:
            return
        from planner.trap import atomic_write

        data = {"preempted": self.preempted, "pinned": self.pinned, "evictions": self.evictions}
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # (SIGINT/SIGTERM wait until the file is complete)
            atomic_write(self.path, text.encode(),
                         block_signals=(signal.SIGINT, signal.SIGTERM))
        except OSError as exc:
            raise StateFileError(f"{self.path}: cannot write the adapter state: "
                                 f"{exc.strerror or exc}") from None

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
        first; older ones are forgotten. One dated after ``now`` (this host's clock
        went back, or another host's clock is ahead) counts as at ``now``: it
        happened, and the budget (R15) must not forget it."""
        kept = [e for e in self.evictions
                if (t := parse_time(e["at"])) is not None and now - keep_s <= t]
        self.evictions = kept
        out = []
        for e in sorted(kept, key=lambda e: min(parse_time(e["at"]) or 0.0, now)):
            rec = dict(e)
            if (parse_time(rec["at"]) or 0.0) > now:
                rec["at"] = iso(now)
            out.append(rec)
        return out


def _bad(path: Path, what: str) -> StateFileError:
    return StateFileError(
        f"{path}: not a valid adapter state file: {what}. Fix it, or move it aside to start "
        "with an empty history (the evictions of the last day, the preemption times and the "
        "pins it holds are then forgotten)")


def lock_path(state_file: str | Path) -> Path:
    """The lock file of a state file: ``<state_file>.lock``."""
    return Path(f"{state_file}.lock")


@contextmanager
def state_lock(state_file: str | Path | None) -> Iterator[Path | None]:
    """Hold an exclusive advisory lock (``flock``) on ``<state_file>.lock`` for the
    block; raises :class:`StateLockError` at once when another process holds it.
    No state file: no lock (yields None). The lock file keeps the holder's pid; it
    is not removed (removing it would let a third process lock another file)."""
    if state_file is None:
        yield None
        return
    lock = lock_path(state_file)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise StateLockError(f"{lock}: cannot open the lock file of the state file "
                             f"{state_file}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            raise StateLockError(
                f"{lock} is locked: another `slurm run` or `slurm apply`{holder} holds it "
                f"and acts on the cluster with the state file {state_file}; two at once "
                "would evict twice and overwrite each other's state. Stop the other one (or "
                "let its apply finish), or give this one another state_file") from None
        except OSError as exc:
            raise StateLockError(f"{lock}: cannot lock it: {exc.strerror or exc}") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # (the pid is a courtesy; the lock is what counts)
        yield lock
    finally:
        os.close(fd)  # releases the lock


def load_locked(held: ExitStack, state_file: str | Path | None, *, lock: bool) -> AdapterState:
    """The state file's state, read after taking its lock (``state_lock``) into
    ``held`` when ``lock`` (a dry run changes nothing and takes none): what `slurm
    apply` holds around load, apply and save, and `slurm run` for the loop's life.
    Raises StateLockError or StateFileError."""
    if lock:
        held.enter_context(state_lock(state_file))
    return AdapterState.load(state_file)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {text})" if text.isdigit() else ""
