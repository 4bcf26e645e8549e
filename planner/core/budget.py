"""The time a planning tick may take: :class:`Budget`, one deadline every phase asks.

A budget starts once, when ``solve_cpsat`` (planner/solver/cpsat.py) is called, and
ends ``seconds`` later on ``time.perf_counter()``. Each phase gets a sub-budget
(``less``, ``until``, ``slice``, ``share``) that never ends after the budget it
came from, so no phase can spend time its caller kept for a later one. The
solver's phases and the heuristics' passes (planner/heuristics) take a budget,
not a clock reading, and stop when it has ended.

In deterministic mode (R14) a budget has no deadline: ``deadline`` is None, it
never expires and every time fits in it; ``left()`` is then its whole length,
which CP-SAT takes as a deterministic time limit. Phases bound by a wall clock
take a number of tries instead (docs/planner.md, section 7).
"""

from __future__ import annotations

import math
import time

# what solver.detail says of a plan whose first greedy run the time limit cut short
# (planner/solver/cpsat.py); the plan then also says where the time went (planner.plan)
CUT_NOTE = "the time limit ended the greedy plan's search for victims"


class Budget:
    """A deadline on ``time.perf_counter()``, or none in deterministic mode."""

    def __init__(self, seconds: float, *, wall: bool = True, start: float | None = None,
                 end: float | None = None):
        self.seconds = seconds  # the length it was given
        self.start = time.perf_counter() if start is None else start
        self.wall = wall
        self.end = (self.start + seconds if end is None else end) if wall else math.inf

    @property
    def deadline(self) -> float | None:
        """The end on ``time.perf_counter()``; None in deterministic mode (no
        deadline)."""
        return self.end if self.wall else None

    def elapsed(self) -> float:
        """Seconds since the budget started."""
        return time.perf_counter() - self.start

    def left(self) -> float:
        """Seconds until the end (the whole length in deterministic mode)."""
        return self.end - time.perf_counter() if self.wall else self.seconds

    def expired(self) -> bool:
        """Is the end past? (Never in deterministic mode.)"""
        return self.wall and time.perf_counter() >= self.end

    def fits(self, seconds: float) -> bool:
        """Does ``seconds`` of work started now end before the end?"""
        return not self.wall or time.perf_counter() + seconds < self.end

    def until(self, end: float) -> Budget:
        """The part of this budget that ends at ``end`` (not after this one's end)."""
        return self._sub(min(end, self.end))

    def less(self, seconds: float) -> Budget:
        """The part of this budget that ends ``seconds`` before its end."""
        return self._sub(self.end - seconds)

    def slice(self, seconds: float) -> Budget:
        """The next ``seconds`` of this budget (at most what is left)."""
        return self.until(time.perf_counter() + seconds)

    def share(self, fraction: float) -> Budget:
        """The next ``fraction`` of the time left."""
        now = time.perf_counter()
        return self.until(now + fraction * (self.end - now))

    def _sub(self, end: float) -> Budget:
        if not self.wall:
            return self
        return Budget(end - self.start, start=self.start, end=end)
