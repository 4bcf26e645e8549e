"""This machine's speed against the benchmark machine's: :func:`factor`.

Some of the planner's times are amounts of work, chosen on the 2-core benchmark
machine (docs/benchmarks.md): an LNS round's CP-SAT time (``lns.ROUND_S``), the
least solve worth building a model for (``model.MIN_SOLVE_S``), the second lane's
grace for its answer (``lanes.GRACE_S``), and a few more (docs/planner.md, section
3, "Machine speed"). Each is used through a function that multiplies it by
:func:`factor`, how much longer the same work takes on this machine: 2.0 on a
machine half as fast, so that an LNS round there does about the work it does on
the benchmark machine.

The factor is measured once per process, at its first use (``planner.warm_up()``,
which the commands call before their first plan; else the first ``plan()``, inside
its time limit), and again at the start of a plan once the measurement is
REMEASURE_S old (:func:`refresh`: a service runs for days), in about 25 ms: a fixed
small CP-SAT solve (one worker, seed 0, solved to optimality: the same search every
time) and a fixed pure-Python loop of the greedy planner's kind of work
(dictionaries, bit masks, a heap, small sorts), each run three times, the fastest
run counting. Each time is divided by its reference, the same measurement's median
on the benchmark machine (REF_*); the factor is the geometric mean of the two
ratios, rounded to a power of 2 ** (1 / STEPS) and clamped to [MIN_FACTOR,
MAX_FACTOR]. The steps (1, 1.19, 1.41, ...) keep a machine's factor the same from
process to process although each measurement varies by a few percent: 0.92-1.09
gives 1, as 139 of 160 processes on the benchmark machine measured (the others,
1.19-1.68, while another process held the core), so that its plans are those its
times were chosen on. (On a shared virtual machine the speed can change for minutes
at a time: on the benchmark machine on 2026-12-04 about half of the processes
measured 1.41-1.68, and those that did built the same problem 1.3-1.5x slower,
docs/benchmarks.md.) The clamp: a fast machine keeps at least half of each time, and
one slow measurement on a busy machine cannot stretch them without bound.

A plan whose cold problem build took BUILD_LEAST_S or more plans with the factor
that build gives (:func:`from_build`, :func:`for_call`) where it is lower: the
build is seconds of the planner's own kind of work, the measurement 25 ms that can
fall on a slow moment.

In deterministic mode (R14) the factor is 1.0 and nothing is measured: no step
there looks at the clock, and a replay gives the same plan on every machine.
``PREEMPT_PLANNER_SPEED`` (a positive number, clamped alike) replaces the
measurement; the tests set it to 1 so that their plans do not depend on the
machine. A value that is not a positive number is ignored.
"""

from __future__ import annotations

import heapq
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache

from ortools.sat.python import cp_model

from planner.solver.cpmodel import CpModel

ENV = "PREEMPT_PLANNER_SPEED"
MIN_FACTOR = 0.5
MAX_FACTOR = 4.0
STEPS = 4  # the factor is a whole power of 2 ** (1 / STEPS)
RUNS = 3  # runs of each measurement; the fastest counts
# A plan's problem build (cold, planner.core.problem.build_problem) takes this long
# per running job on the benchmark machine (from_build()): 16-19 us on generated
# clusters of 1,024 to 12,500 nodes in processes that measured a factor of 0.84-1.0
# (2026-12-04), less the tenth that keeping the GPUs' holders per node saves
# (problem.GpuOwners: 0.75-0.97 of the time of a dictionary entry per GPU, side by
# side at 1,024 to 12,500 nodes), times 0.83, the build's time after its pass over
# the running jobs was rewritten (0.829, 0.830 and 0.828 of the time before at
# 1,024, 4,096 and 12,500 nodes, side by side in one process, median of 7), times
# 0.75, the build's time once that pass read the jobs in the snapshot's order
# (median of 7 builds per process, four pairs of processes side by side: 0.69-0.82
# of the time before at 4,096 nodes, 0.74-0.88 at 12,500), times 0.78, once the pass
# made ``running`` once and left what lasts to the next tick's build (median of 7
# builds, three pairs of processes side by side: 0.80 of the time before at 4,096
# nodes, 0.77 at 12,500, 0.87 at 1,024, 2026-12-07); builds shorter than
# BUILD_LEAST_S (0.1 s times the same 0.75 and 0.78) are not used
BUILD_RUNNING_S = 7.8e-6
BUILD_LEAST_S = 0.059
# a process measures again at the start of a plan when its measurement is this old
# (refresh(); about 25 ms once in 5 minutes)
REMEASURE_S = 300.0
# The references: the median of each measurement (the fastest of RUNS runs, in a
# fresh process; 160 processes for CP-SAT, 80 for Python) on the benchmark machine
# (2 cores of an AMD EPYC, Linux 6.18, Python 3.11.7, OR-Tools 9.15.6755) on
# 2026-12-02, with a simulation running on the other core (ranges 5.9-10.3 ms and
# 1.12-1.22 ms). The CP-SAT solve's search depends on the OR-Tools version:
# measure both again when it changes (python -m planner.solver.speed).
REF_CPSAT_S = 6.1e-3
REF_PYTHON_S = 1.16e-3


def _knapsack() -> cp_model.CpModel:
    """The fixed CP-SAT model: 13 items, each into one of 3 bins or none, the most
    value within the bins' capacities."""
    m = CpModel()
    n = 13
    weight = [(7 * i * i + 3 * i + 5) % 23 + 4 for i in range(n)]
    value = [(5 * i * i + 11 * i + 2) % 31 + 1 for i in range(n)]
    x = [[m.new_bool_var(f"x{i}_{b}") for b in range(3)] for i in range(n)]
    for row in x:
        m.add(sum(row) <= 1)
    for b, cap in enumerate((31, 27, 23)):
        m.add(sum(weight[i] * x[i][b] for i in range(n)) <= cap)
    m.maximize(sum(value[i] * x[i][b] for i in range(n) for b in range(3)))
    return m


def time_cpsat() -> float:
    """Seconds of the fixed CP-SAT solve, the fastest of RUNS."""
    m = _knapsack()
    best = math.inf
    for _ in range(RUNS):
        s = cp_model.CpSolver()
        s.parameters.num_workers = 1
        s.parameters.random_seed = 0
        t = time.perf_counter()
        s.solve(m)
        best = min(best, time.perf_counter() - t)
    return best


def _loop() -> int:
    """The fixed Python work: nodes' free GPU masks in a dict, GPUs counted bit by
    bit, a heap of options, small sorts."""
    free = {i: (i * 2654435761) & 0xFF for i in range(256)}
    heap: list[tuple[int, int, int]] = []
    acc = 0
    for k in range(1000):
        ni = (k * 131) & 0xFF
        m = free[ni]
        c = 0
        while m:
            m &= m - 1
            c += 1
        heapq.heappush(heap, (c, k, ni))
        if len(heap) > 64:
            _c, _k, nj = heapq.heappop(heap)
            free[nj] = (free[nj] ^ (k & 0xFF)) | 1
        if k % 50 == 0:
            top = sorted(heap[:16])
            acc += top[len(top) // 2][0]
        acc += c
    return acc


def time_python() -> float:
    """Seconds of the fixed Python loop, the fastest of RUNS."""
    best = math.inf
    for _ in range(RUNS):
        t = time.perf_counter()
        _loop()
        best = min(best, time.perf_counter() - t)
    return best


def factor_of(cpsat_s: float, python_s: float) -> float:
    """The factor from the two measurements: the geometric mean of their ratios to
    the references, rounded to a whole power of 2 ** (1 / STEPS), clamped to
    [MIN_FACTOR, MAX_FACTOR]."""
    return stepped(math.sqrt(max(1e-12, cpsat_s / REF_CPSAT_S * python_s / REF_PYTHON_S)))


def stepped(f: float) -> float:
    """``f`` (> 0) rounded to a whole power of 2 ** (1 / STEPS) and clamped to
    [MIN_FACTOR, MAX_FACTOR]."""
    f = 2.0 ** (round(STEPS * math.log2(f)) / STEPS)
    return min(MAX_FACTOR, max(MIN_FACTOR, f))


@cache
def measured() -> float:
    """The factor measured on this machine: once per process, and again after
    :func:`refresh` drops a measurement older than REMEASURE_S."""
    global _measured_at
    _measured_at = time.monotonic()
    return factor_of(time_cpsat(), time_python())


_measured_at: float | None = None  # (time.monotonic()) when measured() last measured


def refresh() -> None:
    """Drop the measurement when it is REMEASURE_S old or older, so that the next
    :func:`factor` measures again: a process that plans for days (the service, a
    scheduler loop) follows the machine's speed, which can change over the hours (on
    a shared virtual machine, from one minute to the next). ``plan()`` calls this at
    its start (through ``planner.warm_up``), so a measurement never changes within a
    plan. Nothing happens in a process that has not measured yet."""
    if _measured_at is not None and time.monotonic() - _measured_at >= REMEASURE_S:
        measured.cache_clear()


def _override() -> float | None:
    """The factor ``PREEMPT_PLANNER_SPEED`` sets (clamped), or None."""
    try:
        f = float(os.environ.get(ENV, ""))
    except ValueError:
        return None
    return min(MAX_FACTOR, max(MIN_FACTOR, f)) if f > 0 and math.isfinite(f) else None


def factor(deterministic: bool = False) -> float:
    """How much longer the same work takes on this machine than on the benchmark
    machine: 1.0 in deterministic mode, else ``PREEMPT_PLANNER_SPEED``, else the
    plan's own (:func:`for_call`), else :func:`measured`."""
    if deterministic:
        return 1.0
    f = _override()
    if f is not None:
        return f
    call = _call.get()
    return measured() if call is None else call


# this plan's factor (for_call), where its problem build gave one
_call: ContextVar[float | None] = ContextVar("speed_for_call", default=None)


def build_of(build_s: float, running: int) -> float | None:
    """What a plan's own problem build (``build_s`` seconds, cold, for ``running``
    running jobs) says of this machine: the build's time against BUILD_RUNNING_S per
    running job, in the steps of :func:`factor_of` and clamped alike. None where the
    build took less than BUILD_LEAST_S (too short to tell), with
    ``PREEMPT_PLANNER_SPEED`` set, or in a process whose factor is not measured
    yet."""
    if build_s < BUILD_LEAST_S or running <= 0 or _override() is not None \
            or measured.cache_info().currsize == 0:
        return None
    return stepped(max(1e-12, build_s / (BUILD_RUNNING_S * running)))


def from_build(build_s: float, running: int) -> float | None:
    """A plan's factor from its own problem build (:func:`build_of`), but never above
    the measured factor (a 25 ms measurement can catch a slow moment; the build is
    seconds of the planner's own kind of work); None where :func:`build_of` is."""
    f = build_of(build_s, running)
    return None if f is None else min(measured(), f)


@contextmanager
def for_call(f: float | None, build: float | None = None) -> Iterator[None]:
    """Within the block, :func:`factor` (outside deterministic mode and without
    ``PREEMPT_PLANNER_SPEED``) is ``f`` (None: the measured factor), and
    :func:`records_factor` takes ``build`` (:func:`build_of` of the plan's build,
    None: none) into account."""
    token, token_build = _call.set(f), _build.set(build)
    try:
        yield
    finally:
        _call.reset(token)
        _build.reset(token_build)


# this plan's build's own factor (for_call's ``build``), where it gave one
_build: ContextVar[float | None] = ContextVar("speed_of_build", default=None)


def records_factor(deterministic: bool = False) -> float:
    """:func:`factor`, or what the plan's own problem build said (:func:`for_call`)
    where that is higher: for work of the build's kind, passes over every record of
    the tick (assembling the plan, the checks, freeing). On the 12,500-node
    benchmark tick at 2 s, in moments where the build took 0.43-0.57 s (the build
    says 1.19-1.68) while the measured factor was 0.59-0.71, that work took 0.4-0.45
    s after the first greedy run's cut where the cut kept some 0.3 s (plans of
    2.23-2.34 s)."""
    f = factor(deterministic)
    if deterministic or _override() is not None:
        return f
    b = _build.get()
    return f if b is None else max(f, b)


def scaled(seconds: float, deterministic: bool = False) -> float:
    """``seconds`` of work on the benchmark machine, on this one."""
    return seconds * factor(deterministic)


if __name__ == "__main__":  # the measurements, to set the references
    c, py = time_cpsat(), time_python()
    print(f"cpsat_s {c:.6f} python_s {py:.6f} ratio {math.sqrt(c / REF_CPSAT_S * py / REF_PYTHON_S):.3f} "
          f"factor {factor_of(c, py):.3f}")
