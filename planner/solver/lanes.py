"""A second lane: Python work on the other core, in a forked child process.

On clusters too big for the whole CP-SAT model within the budget (1,024 nodes at
1 s, 4,096 nodes at 5 s) the planner's work is Python (greedy variants, ejection
moves, polishing), which holds one core, while ``workers`` allows two. A
:class:`Lane` runs a function in a child process forked from the planner, so it
starts at once with the problem already in memory (copy on write; about 2-4 ms
at 1,024-4,096 nodes), and hands back its picklable result through a pipe.

The child is only ever an extra candidate: the parent keeps its own plan, and
takes the child's only when it is better and arrives before the parent's
deadline. A child that fails, is late or cannot be started gives ``None``; a late
child is killed. Lanes are used only where forking is safe and useful
(:func:`available`): Linux's ``fork``, at least two usable cores and
``workers >= 2``, no other Python thread in the process (forking a process
with running threads can copy a lock some thread holds; a server calling
``plan()`` from threads, like planner/service.py without ``processes``, plans in
one lane), and not inside a daemonic process. Deterministic mode never uses
lanes (R14: its plan must not depend on timing). docs/planner.md, section 2c,
says what each lane does.
"""

from __future__ import annotations

import inspect
import multiprocessing as mp
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from planner.core.budget import Budget
from planner.solver.speed import scaled

# lanes may be used at all (benchmarks/bench_lanes.py compares plans without them)
ENABLED = True
# time the parent keeps, past the deadline it gave the child, for the child's answer
# in the pipe (planner/solver/cpsat.py ends the child this long before its own deadline; a
# 4,096-node plan is 54 KB, unpickled in 0.5 ms), on the benchmark machine (grace_s():
# on this one)
GRACE_S = 0.02


def grace_s() -> float:
    """GRACE_S on this machine (scaled by planner/solver/speed.py's factor; lanes
    run only with a wall clock)."""
    return scaled(GRACE_S)


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def available(workers: int) -> bool:
    """May a second lane run: ``workers >= 2``, two usable cores, Linux (``fork``
    without ``exec`` is unsafe on macOS, absent on Windows), no other Python
    thread, and not inside a daemonic process (``multiprocessing.Pool`` workers
    may not have children)?"""
    return (ENABLED and workers >= 2 and cores() >= 2 and sys.platform.startswith("linux")
            and "fork" in mp.get_all_start_methods()
            and threading.active_count() == 1 and not mp.current_process().daemon)


def _answer(send: Connection, value: Any) -> bool:
    """Send ``value`` to the parent; False (and the parent told why) if it does not
    pickle. (OSError: the parent is gone or stopped listening.)"""
    try:
        send.send((True, value))
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. a result that does not pickle
        send.send((False, f"{type(e).__name__} sending the result: {e}"))
        return False
    return True


def _child(send: Connection, stop: Any, fn: Callable[..., Any], args: tuple) -> None:
    # Ctrl-C and SIGTERM are the parent's to handle (the Slurm loop, for one, stops
    # after its tick): the child ignores the first and dies of the second
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        try:
            out = fn(*args)
            if not inspect.isgenerator(out):
                _answer(send, out)
                return
            # a generator: each value it yields is an answer of its own, in order; the
            # next is not worked out once the parent asked for no more (Lane.stop)
            for value in out:
                if not _answer(send, value) or stop.is_set():
                    return
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure: the parent plans without it
            send.send((False, f"{type(e).__name__}: {e}"))
    except OSError:  # the parent is gone or stopped listening: nothing to tell it
        pass
    finally:
        send.close()


class Lane:
    """``fn(*args)`` in a forked child process; :meth:`result` collects it. Where ``fn``
    is a generator function, each value it yields is an answer of its own:
    :meth:`result` with ``more=True`` collects one and leaves the child to work out
    the next (a plan, then a bound on it: portfolio.FloorLane); :meth:`stop` asks it
    to work out no more after the answer it is on."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        ctx = mp.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)
        self._stop = ctx.Event()
        self._proc = ctx.Process(target=_child, args=(send, self._stop, fn, args),
                                 daemon=True)
        self._proc.start()
        send.close()  # (the child's end: EOF here when the child dies)
        self.error: str | None = None  # why there is no result, when there is none

    def result(self, budget: Budget, *, more: bool = False) -> Any | None:
        """The child's (next) answer if it arrives by the end of ``budget`` (a
        wall-clock one) plus grace_s(), else None (``error`` says why); the child is
        then gone, unless an answer came and ``more`` answers are wanted."""
        got = False
        try:
            if self._recv.poll(max(0.0, budget.left() + grace_s())):
                ok, value = self._recv.recv()
                if ok:
                    got = True
                    return value
                self.error = f"failed ({value})"
            else:
                self.error = "late"
        except (EOFError, OSError) as e:  # the child died without an answer
            self.error = f"died ({type(e).__name__})"
        finally:
            if not (got and more):
                self.close()
        return None

    def ready(self) -> bool:
        """Is an answer waiting (or the child gone), so that :meth:`result` would not
        wait?"""
        try:
            return self._recv.poll(0)
        except (EOFError, OSError):
            return True

    def stop(self) -> None:
        """Ask the child to work out no answer after the one it is on (a generator's)."""
        self._stop.set()

    def __del__(self) -> None:  # a plan() that raised: the child goes with it
        if hasattr(self, "_proc"):
            self.close()

    def close(self) -> None:
        """Stop the child if it still runs, and reap it."""
        if self._proc.pid is not None:  # (started)
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=1.0)
        self._recv.close()
