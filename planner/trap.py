"""Checkpoint-on-signal trap for training code evicted by preempt-planner.

The planner evicts a job by sending it a signal (``SIGTERM`` unless the job's
``checkpoint.signal`` says otherwise) and killing it ``grace_s`` seconds later.
This module lets a training loop survive that: finish the current step, write a
checkpoint atomically, publish a sidecar with the job's checkpoint metadata and
exit with status 0 so that the job is requeued rather than marked failed.

It uses the standard library only and imports nothing else from the project, so
it can be imported as ``planner.trap`` or copied next to the training script.

Training loop::

    from planner.trap import CheckpointTrap, load_latest

    blob = load_latest(CKPT)            # None on the first run
    state = deserialize(blob) if blob is not None else fresh()
    with CheckpointTrap(CKPT, lambda f: f.write(serialize(state)),
                        barrier_s=10, cleanup_s=5, restore_s=600) as trap:
        while state.step < total_steps:
            train_one_step(state)
            trap.step_done(save=state.step % 1000 == 0)

``step_done`` is where everything happens, at a step boundary: after a trapped
signal it writes the checkpoint and calls ``sys.exit(0)``; otherwise, with
``save=True``, it writes a periodic checkpoint. The signal handler itself only
sets a flag, so a signal never interrupts a step, an optimizer update or a write
in progress. A signal that arrives during a write is held back (the trapped
signals are blocked with ``pthread_sigmask`` while the checkpoint is written)
and only sets the flag again. Code that must run its own cleanup passes
``exit_on_signal=False`` and breaks out of the loop when ``step_done`` returns
True. Multi-rank jobs must stop at the same step on every rank: reduce the flag
before the boundary and propagate it, e.g. with torch.distributed::

    flag = torch.tensor([int(trap.should_stop)], device=dev)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item():
        trap.request_stop()
    trap.step_done(save=...)

The time from the signal to the end of the current step plus the collective is
what the job should declare as ``checkpoint.barrier_s``; the planner's grace is
``safety * (flush_s + barrier_s + cleanup_s)``, bounded by ``grace.max_s``.
A loop that does not reach a step boundary within the grace is killed with
SIGKILL; the atomic write guarantees that the previous checkpoint then survives.

Slurm: the planner (or ``#SBATCH --signal=B:TERM@120``, which signals 120 s
before the time limit) sends ``scancel --signal=TERM --batch <jobid>``, which
signals the batch shell only, not its children. The batch script must therefore
make Python the batch shell, ``exec python train.py ...``, or trap and forward::

    python train.py "$@" &
    child=$!
    trap 'kill -TERM "$child"' TERM USR1
    wait "$child"; wait "$child"   # the first wait returns when the trap fires

Without ``B:`` (and for ``scancel --signal=TERM`` without ``--batch``) Slurm
signals the tasks of every ``srun`` step instead of the batch shell, which also
works when each task runs the trap; ``scancel --full`` signals both. Submit
with ``--requeue`` and resume from ``load_latest``.

Kubernetes: on eviction the kubelet sends SIGTERM to PID 1 of every container,
waits ``terminationGracePeriodSeconds`` (make it at least the policy's
``grace.max_s`` plus any preStop hook time) and then sends SIGKILL. Python must
be PID 1 (exec-form ``command: ["python", "train.py"]``, or ``exec python`` at
the end of a shell entrypoint) or run under an init that forwards signals
(``tini``, ``dumb-init``); ``sh -c "python train.py"`` swallows the SIGTERM.
Put the checkpoint on a persistent volume.

Sidecar: after every successful checkpoint the trap writes, also atomically,
a JSON file that the Slurm and Kubernetes adapters read (path: the
``PREEMPT_PLANNER_SIDECAR`` environment variable, else ``<checkpoint>.meta.json``)::

    {"size_gb": 0.0525, "last_at": "2026-11-29T07:40:00Z", "signal": "SIGTERM",
     "barrier_s": 10, "cleanup_s": 5, "restore_s": 600,
     "path": "/ckpt/model.bin", "reason": "periodic"}

The first six fields are the job's ``checkpoint`` object of the data contract
(format v1): ``size_gb`` in decimal GB (1e9 bytes) of the checkpoint file,
``last_at`` the completion time in ISO-8601 UTC. ``reason`` is ``"periodic"`` or
``"signal"``; a signal checkpoint also records ``"received"`` (the signal name).
A job that writes several shard files gives each writer its own sidecar path.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from types import FrameType, TracebackType
from typing import IO, Any, Self

__all__ = [
    "SIDECAR_ENV",
    "CheckpointTrap",
    "atomic_write",
    "load_latest",
    "read_sidecar",
    "remove_stale_temps",
    "sidecar_path",
]

SIDECAR_ENV = "PREEMPT_PLANNER_SIDECAR"
"""Environment variable naming the sidecar path; unset = ``<checkpoint>.meta.json``."""

_TMP_TAG = ".tmp-"
_TMP_SUFFIX = ".partial"
_BYTES_PER_GB = 1e9

log = logging.getLogger(__name__)

Writer = Callable[[IO[bytes]], Any]
"""Writes the checkpoint into a binary file object; may instead return bytes."""

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _default_signals() -> tuple[int, ...]:
    sigs = [signal.SIGTERM]
    if hasattr(signal, "SIGUSR1"):
        sigs.append(signal.SIGUSR1)
    return tuple(sigs)


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Read once at import (os.umask can only be read by setting it, which is racy
# with threads); new files get the permissions a plain open() would give them.
_UMASK = _read_umask()


class _blocked:
    """Block ``signals`` in the calling thread for the duration of the block.

    A blocked signal stays pending and is delivered when the block ends. SIGKILL
    cannot be blocked; atomicity never relies on this, only completeness does.
    """

    def __init__(self, signals: Iterable[int]) -> None:
        self._signals = set(signals)
        self._old: set[int] | None = None

    def __enter__(self) -> None:
        if self._signals and hasattr(signal, "pthread_sigmask"):
            self._old = signal.pthread_sigmask(signal.SIG_BLOCK, self._signals)

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old)
            self._old = None


def _fsync_dir(directory: str) -> None:
    """Persist a rename: fsync the directory entry (POSIX only)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tmp_prefix(path: str) -> str:
    return "." + os.path.basename(path) + _TMP_TAG


def atomic_write(
    path: str | os.PathLike[str],
    data_or_callable: bytes | bytearray | memoryview | Writer,
    *,
    block_signals: Iterable[int] = (),
) -> int:
    """Write a file so that ``path`` always holds either the old or the new content.

    ``data_or_callable`` is bytes, or a callable that receives a binary file
    object and writes into it (if it returns bytes instead, they are written).
    The content goes to a temporary file in the same directory, which is
    flushed, fsync'd and ``os.replace``'d onto ``path``; then the directory is
    fsync'd. If the process dies at any moment, even by SIGKILL, ``path`` is
    untouched or complete; at worst a ``.<name>.tmp-XXXXXXXX.partial`` file is
    left behind (see ``remove_stale_temps``). On an exception the temporary
    file is removed and ``path`` is untouched.

    ``block_signals`` are blocked in the calling thread during the write and
    delivered afterwards, so that they cannot cut the write short.
    Returns the size of the written file in bytes.

    A symbolic link at ``path`` stays a link: the file it points to is written.
    Something at ``path`` that is not a regular file (a device such as
    ``/dev/stdout``, a FIFO) is written into, not replaced (there is no atomic way
    to write it, and replacing it would put a file in its place).
    """
    given = os.fspath(path)
    try:  # (through every link: /dev/stdout -> /proc/self/fd/1 -> a pipe has no path)
        special = not stat.S_ISREG(os.stat(given).st_mode)
    except FileNotFoundError:
        special = False
    if special:
        with _blocked(block_signals), open(given, "wb") as f:
            data = data_or_callable(f) if callable(data_or_callable) else data_or_callable
            if isinstance(data, bytes | bytearray | memoryview):
                f.write(data)
            f.flush()
            return f.tell() if f.seekable() else 0
    path = os.path.realpath(given)
    directory = os.path.dirname(path)
    with _blocked(block_signals):
        fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=_TMP_SUFFIX, dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                if callable(data_or_callable):
                    returned = data_or_callable(f)
                    if isinstance(returned, bytes | bytearray | memoryview):
                        f.write(returned)
                else:
                    f.write(data_or_callable)
                f.flush()
                try:
                    mode = os.stat(path).st_mode & 0o7777
                except FileNotFoundError:
                    mode = 0o666 & ~_UMASK
                if hasattr(os, "fchmod"):
                    os.fchmod(f.fileno(), mode)
                os.fsync(f.fileno())
                size = os.fstat(f.fileno()).st_size
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        _fsync_dir(directory)
    return size


def remove_stale_temps(path: str | os.PathLike[str]) -> list[str]:
    """Delete temporary files that an interrupted ``atomic_write(path, ...)`` left.

    Only call this when no other process writes ``path`` concurrently (a
    training job owns its checkpoint path). Returns the removed paths.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    prefix = _tmp_prefix(path)
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return removed
    for name in names:
        # mkstemp inserts exactly 8 random characters between prefix and suffix
        if (
            name.startswith(prefix)
            and name.endswith(_TMP_SUFFIX)
            and len(name) == len(prefix) + 8 + len(_TMP_SUFFIX)
        ):
            full = os.path.join(directory, name)
            try:
                os.unlink(full)
                removed.append(full)
            except FileNotFoundError:
                pass
    return removed


def load_latest(path: str | os.PathLike[str]) -> bytes | None:
    """Return the bytes of the last complete checkpoint at ``path``, or None.

    Checkpoints are only ever renamed into place complete, so whatever is at
    ``path`` is complete; temporary files of an interrupted write are ignored.
    """
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def sidecar_path(checkpoint_path: str | os.PathLike[str]) -> str:
    """The sidecar path: ``$PREEMPT_PLANNER_SIDECAR`` if set, else ``<checkpoint>.meta.json``."""
    env = os.environ.get(SIDECAR_ENV)
    return env if env else os.fspath(checkpoint_path) + ".meta.json"


def read_sidecar(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a sidecar file (see the module docstring for its fields).

    Raises ``FileNotFoundError`` when there is none and ``ValueError`` when the
    file is not a JSON object with numeric ``size_gb`` and a ``last_at``.
    """
    # Bad content of the file is a ValueError (like json's own errors), not a TypeError.
    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    if not isinstance(meta, dict):
        raise ValueError(f"{os.fspath(path)}: sidecar is not a JSON object")  # noqa: TRY004
    size = meta.get("size_gb")
    if isinstance(size, bool) or not isinstance(size, int | float) or size < 0:
        raise ValueError(f"{os.fspath(path)}: size_gb must be a non-negative number")
    if not isinstance(meta.get("last_at"), str):
        raise ValueError(f"{os.fspath(path)}: last_at must be an ISO-8601 string")  # noqa: TRY004
    return meta


def _utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


class CheckpointTrap:
    """Turn an eviction signal into "finish the step, checkpoint, exit 0".

    ``path`` is the checkpoint file; ``save_fn(fileobj)`` writes the current
    training state into a binary file object (or returns it as bytes).
    ``signals`` are trapped while the context is active (default SIGTERM and
    SIGUSR1); previous handlers are restored on exit. ``barrier_s``,
    ``cleanup_s`` and ``restore_s`` are copied into the sidecar (format v1
    ``checkpoint`` fields); ``signal_name`` is the sidecar's ``signal``
    (default: the first trapped signal). ``sidecar`` overrides the sidecar
    path (default: ``sidecar_path(path)``). With ``exit_on_signal`` (default)
    ``step_done`` calls ``sys.exit(exit_code)`` after the signal checkpoint;
    without it, ``step_done`` returns True and the caller stops.
    ``on_checkpoint(meta)`` is called after every checkpoint with the sidecar
    dict. ``clean_stale`` removes temporary files of an earlier killed write
    on entry.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        save_fn: Writer,
        *,
        signals: Iterable[int | signal.Signals] | None = None,
        exit_on_signal: bool = True,
        exit_code: int = 0,
        barrier_s: float = 0,
        cleanup_s: float = 0,
        restore_s: float = 0,
        signal_name: str | None = None,
        sidecar: str | os.PathLike[str] | None = None,
        on_checkpoint: Callable[[dict[str, Any]], Any] | None = None,
        clean_stale: bool = True,
    ) -> None:
        if not callable(save_fn):
            raise TypeError("save_fn must be a callable taking a binary file object")
        self.path = os.fspath(path)
        self.save_fn = save_fn
        self.signals: tuple[int, ...] = tuple(
            int(s) for s in (_default_signals() if signals is None else signals)
        )
        if not self.signals:
            raise ValueError("signals must name at least one signal")
        self.exit_on_signal = exit_on_signal
        self.exit_code = exit_code
        self.barrier_s = barrier_s
        self.cleanup_s = cleanup_s
        self.restore_s = restore_s
        self.signal_name = signal_name or _signal_name(self.signals[0])
        self.sidecar = os.fspath(sidecar) if sidecar is not None else sidecar_path(self.path)
        self.on_checkpoint = on_checkpoint
        self.clean_stale = clean_stale
        self.last_meta: dict[str, Any] | None = None
        """Sidecar dict of the last checkpoint written by this trap."""
        self.signal_count = 0
        """How many trapped signals arrived (a second SIGTERM counts too)."""
        self.received: str | None = None
        """Name of the last trapped signal received, or None."""
        self._stop = False
        self._done = False
        self._previous: dict[int, _Handler] = {}

    # -- context manager -------------------------------------------------

    def __enter__(self) -> Self:
        if self._previous:
            raise RuntimeError("CheckpointTrap is already active")
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("CheckpointTrap must be entered in the main thread")
        if self.clean_stale:
            remove_stale_temps(self.path)
            remove_stale_temps(self.sidecar)
        try:
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._restore()

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            # None = a handler installed outside Python; it cannot be reinstalled
            if previous is not None:
                signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Runs between bytecodes of the main thread: only record the request.
        self.signal_count += 1
        self.received = _signal_name(signum)
        self._stop = True

    # -- the loop's interface ---------------------------------------------

    @property
    def should_stop(self) -> bool:
        """True once a trapped signal arrived (or ``request_stop`` was called)."""
        return self._stop

    def request_stop(self) -> None:
        """Stop at the next ``step_done`` as if a signal had arrived (e.g. on another rank)."""
        self._stop = True

    def step_done(self, save: bool = False) -> bool:
        """Call at every step boundary; ``save=True`` also writes a periodic checkpoint.

        After a trapped signal: write the checkpoint, then exit the process
        (``exit_on_signal``) or return True. Otherwise return False.
        """
        if self._done:
            return True
        if self._stop:
            self._checkpoint("signal")
            return self._finish()
        if save:
            self.save()
            if self._stop:
                # The signal came during the periodic write: nothing has changed
                # since, so that checkpoint is current.
                return self._finish()
        return False

    def save(self) -> dict[str, Any]:
        """Write a periodic checkpoint now; return its sidecar dict."""
        return self._checkpoint("periodic")

    # -- internals ----------------------------------------------------------

    def _finish(self) -> bool:
        self._done = True
        log.info("stopping after %s; checkpoint at %s", self.received or "stop request", self.path)
        if self.exit_on_signal:
            sys.exit(self.exit_code)
        return True

    def _checkpoint(self, reason: str) -> dict[str, Any]:
        # Signals stay blocked across the data and the sidecar, so a second
        # SIGTERM cannot interleave; it is delivered (and sets the flag) after.
        with _blocked(self.signals):
            size = atomic_write(self.path, self.save_fn)
            meta: dict[str, Any] = {
                "size_gb": size / _BYTES_PER_GB,
                "last_at": _utc_now_iso(),
                "signal": self.signal_name,
                "barrier_s": self.barrier_s,
                "cleanup_s": self.cleanup_s,
                "restore_s": self.restore_s,
                "path": os.path.abspath(self.path),
                "reason": reason,
            }
            if reason == "signal" and self.received:
                meta["received"] = self.received
            try:
                atomic_write(self.sidecar, (json.dumps(meta, indent=1) + "\n").encode())
            except OSError as exc:
                # The checkpoint itself is safe; a stale sidecar only makes the
                # planner assume more lost work.
                log.warning("could not write sidecar %s: %s", self.sidecar, exc)
        self.last_meta = meta
        log.info("checkpoint (%s) %s: %d bytes", reason, self.path, size)
        if self.on_checkpoint is not None:
            self.on_checkpoint(meta)
        return meta
