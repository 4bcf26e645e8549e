"""preempt-planner: choose which pending jobs start where and the minimum-cost set
of running jobs to evict, under the rules of the data contract.

Library entry point for other schedulers::

    from models import load_snapshot
    from planner import plan
    p = plan(load_snapshot("snapshot.json"), time_limit_s=1.0)
"""

from __future__ import annotations

import importlib
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models import Plan, Policy, Snapshot, SolverInfo, load_snapshot, range_problems
from models.cache import SnapshotCache
from models.load import gc_paused
from models.rules import priority_scale, priority_value, scaled_priority

if TYPE_CHECKING:
    from planner.core.decision import Decision
    from planner.core.problem import Problem

PLANNERS = ("cpsat", "greedy", "k8s", "slurm")
# ... and the simulator's naive priority preemption (planner/sim/naive.py)
SIM_PLANNERS = (*PLANNERS, "naive")

__all__ = ["PLANNERS", "SIM_PLANNERS", "Loop", "plan", "warm_up"]


# a plan within its limit says what loading, building the problem and the checks took
# (its floor) when that is at least this share of the limit
FLOOR_SHARE = 0.25
# on the benchmark machine, times this machine's speed factor (planner/solver/speed.py):
OVER_S = 0.05  # a plan later than its time limit by more than this says so in solver.detail
LEAST_S = 0.05  # the least time solve_cpsat gets, whatever preprocessing took


def warm_up(deterministic: bool = False) -> float:
    """Import the CP-SAT planner (OR-Tools: about 0.3 s) and measure this machine's
    speed (planner/solver/speed.py, about 25 ms), once per process and again when
    the measurement is 5 minutes old (``speed.refresh``); returns the speed factor.
    The first ``plan()`` of a process does this inside its time limit: a caller that
    plans every tick (a service, a scheduler loop) calls this before its first tick
    so that the first plan gets the whole limit to plan."""
    importlib.import_module("planner.solver.cpsat")
    from planner.solver.speed import factor, refresh

    if not deterministic:
        refresh()
    return factor(deterministic)


def plan(snapshot: Snapshot | dict[str, Any] | str | Path,
         policy: Policy | dict[str, Any] | None = None, *, time_limit_s: float = 1.0,
         deterministic: bool = False, workers: int = 2, planner: str = "cpsat",
         seed: int = 0, bound_s: float = 0.0, loop: Loop | None = None,
         started: float | None = None) -> Plan:
    """Plan one scheduling tick, within ``time_limit_s`` from this call (loading a
    dict snapshot included, and on the first call of a process :func:`warm_up`), or
    from ``started`` (a ``time.perf_counter()`` reading: when the caller began
    reading the snapshot it passes, say).

    A pure function of its inputs: ``policy`` (when given) replaces the snapshot's
    policy; ``deterministic`` uses one worker, a deterministic time budget and a
    fixed seed (R14). The returned plan always passes the verifier (R1-R13): if
    the solver finds nothing in time the greedy plan is returned (``fallback``);
    if a CP-SAT plan ever failed verification, the greedy plan, and if even that
    were invalid, a plan that evicts nothing.

    ``bound_s`` > 0 spends up to that many seconds more, after the plan, proving
    how far it is from the optimum with a relaxation solved by CP-SAT
    (planner/solver/bound.py): ``solver.gap`` and ``solver.bound`` then come from it
    where the plan had none, and a plan it proves optimal gets status ``optimal``.

    ``loop`` (a :class:`Loop`, or call its ``plan``): the tick is one of a sequence
    of the same cluster; what the last tick read and derived and this one did not
    change is taken over. The plan is the same, except where the last tick's plan
    was not carried out and still holds: the search then goes on from it.
    """
    if started is None:
        started = time.perf_counter()  # the time limit counts from here
    if planner not in PLANNERS:
        raise ValueError(f"unknown planner {planner!r} (choose from {', '.join(PLANNERS)})")
    if not time_limit_s > 0:  # (NaN too)
        raise ValueError(f"time_limit_s must be a positive number of seconds, got {time_limit_s!r}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers!r}")
    if not bound_s >= 0:
        raise ValueError(f"bound_s must be 0 or a positive number of seconds, got {bound_s!r}")
    if range_problems(seeds=[("seed", seed)]):
        raise ValueError(range_problems(seeds=[("seed", seed)])[0])
    # the collector would walk the whole snapshot several times per tick; planning
    # makes no cyclic garbage (tests/test_gc.py), so none is left to collect after
    with gc_paused(acyclic=True):
        return _plan(snapshot, policy, time_limit_s=time_limit_s, deterministic=deterministic,
                     workers=workers, planner=planner, seed=seed, bound_s=bound_s,
                     started=started, loop=loop)


class Loop:
    """A scheduling loop's planner: one cluster's ticks planned one after another
    (``slurm run``, the service's ``X-Cluster``, the simulator).

    Each tick's snapshot differs from the last by a few records (arrivals,
    completions, the jobs the last plan started and evicted). A loop keeps what
    the last tick read and derived, and takes over what did not change: a record
    whose document did not change is not validated again
    (``models.cache.SnapshotCache``); a running job's storage, flush, storm cap and
    GPUs, and each pending shape's candidate nodes, are not worked out again while
    the records they come from are the same objects
    (``planner.core.problem.build_problem(snap, previous)``). The last tick's plan,
    where nothing it rests on changed (the plan was not carried out: a dry run, a
    client asking again), is a candidate (``planner.core.decision.carried``). The
    plan is the one :func:`plan` makes of the same snapshot with the same options,
    or, where the last plan was carried, a plan at least as good as that one
    (tests/test_incremental.py: in deterministic mode never worse than plan()'s
    there either: docs/planner.md, section 1b).

    It holds the last tick's snapshot and problem (about 220 MB at 12,500 nodes).
    Calls are serialised (a lock), so threads may share one loop.
    """

    def __init__(self) -> None:
        self.loader = SnapshotCache()
        self.problem: Problem | None = None  # the last tick's, lent to the next
        self.decision: Decision | None = None  # its plan's (a hint where still valid)
        self.ticks = 0
        self._lock = threading.Lock()

    def plan(self, snapshot: Snapshot | dict[str, Any] | str | Path,
             policy: Policy | dict[str, Any] | None = None, **options: Any) -> Plan:
        """:func:`planner.plan` of the next tick (the same options); a snapshot given
        as a document or a file is read with the last tick's records taken over."""
        with self._lock:
            return self._planned(plan(snapshot, policy, loop=self, **options))

    def plan_text(self, data: bytes, **options: Any) -> Plan | None:
        """:meth:`plan` of the next tick given as a JSON text (a request's body), read
        from its text (``models.cache.SnapshotCache.load_text``: the records whose
        text did not change taken over), the time limit counting from this call;
        None for a text read only by parsing it (then parse it and pass the
        document to :meth:`plan`). Raises InputError for a snapshot that is wrong."""
        started = time.perf_counter()
        with self._lock:
            snap = self.loader.load_text(data)
            if snap is None:
                return None
            return self._planned(plan(snap, loop=self, started=started, **options))

    def _planned(self, out: Plan) -> Plan:
        """A tick's plan, counted, and the decision it took (a hint to the next)."""
        self.ticks += 1
        if self.problem is not None:
            from planner.core.decision import decision_of

            self.decision = decision_of(self.problem, out)
        return out


def _plan(snapshot: Snapshot | dict[str, Any] | str | Path,
          policy: Policy | dict[str, Any] | None, *,
          time_limit_s: float, deterministic: bool, workers: int, planner: str,
          seed: int, bound_s: float = 0.0, started: float | None = None,
          loop: Loop | None = None) -> Plan:
    from planner.checks.assemble import assemble
    from planner.core.budget import CUT_NOTE
    from planner.core.decision import Decision
    from planner.core.problem import build_problem

    t0 = time.perf_counter() if started is None else started
    speed = 1.0  # this machine's time for the benchmark machine's work (planner/solver/speed.py)
    if planner == "cpsat":  # import OR-Tools and measure the speed (outside deterministic
        # mode), once per process and again once 5 minutes old: inside the time limit
        # (warm_up() does it before)
        speed = warm_up(deterministic)
    t_warm = time.perf_counter()
    snap = snapshot if isinstance(snapshot, Snapshot) and policy is None else \
        (loop.loader.load if loop is not None else load_snapshot)(snapshot, policy)
    # CP-SAT weighs integers only: every priority given as a number that is not an
    # int (2.5, and 10.0 too, whose scale is 1) is planned as an exact integer
    whole = snap.integer_priorities()
    scale = 1 if whole else priority_scale(j.priority for j in snap.jobs)
    # a loop's last tick: its problem, lent to this one, and its plan, a candidate
    # where nothing it rests on changed (planner/core/decision.py, carried)
    last = (loop.problem, loop.decision) if loop is not None and loop.problem is not None \
        and loop.decision is not None else None
    previous = loop.problem if loop is not None else None
    planned = snap if whole else _scaled(snap, scale)
    t_build = time.perf_counter()
    problem = build_problem(planned, previous)
    if loop is not None:  # (the decision of this problem's plan: Loop.plan, after it)
        loop.problem, loop.decision = problem, None
    t_pre = time.perf_counter()  # the preprocessing ends, planning starts
    call_speed = None  # this plan's speed factor from its own (cold) problem build
    call_build = None  # ... what that build alone says (speed.records_factor)
    if planner == "cpsat" and not deterministic and previous is None:
        from planner.solver.speed import build_of, from_build

        call_speed = from_build(t_pre - t_build, len(problem.running))
        call_build = build_of(t_pre - t_build, len(problem.running))
        if call_speed is not None:
            speed = call_speed

    def exact(p: Plan) -> Plan:
        """Fractional priorities were planned scaled to integers: the objective in the
        snapshot's own numbers (the order of every choice is the same)."""
        if not whole:
            jobs = snap.job_map()
            p.objective.priority_value = priority_value(jobs[pl.job] for pl in p.placements)
        return p

    def finish(p: Plan) -> Plan:
        nonlocal problem, snap, planned, last, previous
        n_reserved = len(problem.reserved)
        proving = problem if bound_s > 0 else None
        t_free = time.perf_counter()
        # what this tick built is freed here, not as this call returns: the caller
        # waits for it too (0.02-0.05 s at 4,096 nodes, 0.07-0.15 s at 12,500; a
        # caller keeps its snapshot, a loop this tick's problem and frees the last's)
        del problem, snap, planned, last, previous
        end = time.perf_counter()
        wall = end - t0
        p.solver.wall_s = round(wall, 4)
        over = wall > time_limit_s + OVER_S * speed
        cut = CUT_NOTE in (p.solver.detail or "")
        if planner == "cpsat" and not deterministic and (over or cut):
            # say so, with where the time went: on big clusters a short limit is below
            # what preprocessing, the greedy plan, explanations and the checks take
            # (README, time_limit_s)
            p.solver.detail = _with(p.solver.detail, (
                f"took {wall:.2f} s, {'over' if over else 'of'} the time limit of "
                f"{time_limit_s:g} s: "
                + (f"{t_warm - t0:.2f} s importing the solver and measuring this "
                   "machine's speed (planner.warm_up() does it before the first plan), "
                   if t_warm - t0 >= 0.01 else "")
                + f"{t_pre - t_warm:.2f} s loading the snapshot and building "
                f"the problem, {t_checks - t_pre:.2f} s planning, {t_free - t_checks:.2f} s "
                "checking the plan"
                + (f", {end - t_free:.2f} s freeing what the tick built"
                   if end - t_free >= 0.01 else "")
                + " (too short for this cluster: see 'Choosing "
                f"time_limit_s' in the README; this machine's speed factor {speed:.2f})"))
        elif planner == "cpsat" and not deterministic:
            # the floor, where it is a good part of the limit (big clusters): what
            # loading, building the problem, the verifier and freeing took, whatever
            # the plan
            floor = (t_pre - t_warm) + (end - t_checks)
            if floor >= FLOOR_SHARE * time_limit_s:
                p.solver.detail = _with(p.solver.detail, (
                    f"{floor:.2f} s of the time limit of {time_limit_s:g} s went to "
                    f"loading the snapshot and building the problem ({t_pre - t_warm:.2f} "
                    f"s) and checking the plan ({t_free - t_checks:.2f} s)"
                    + (f" and freeing what the tick built ({end - t_free:.2f} s)"
                       if end - t_free >= 0.01 else "")))
        if proving is not None:
            _bound(proving, p, bound_s, deterministic=deterministic, workers=workers, seed=seed)
        if n_reserved and p.solver.gap is not None:
            p.solver.detail = _with(p.solver.detail, (
                f"the gap and bound are among the plans that keep the {n_reserved} node"
                f"{'s' if n_reserved > 1 else ''} of policy.reserve open"))
        return p

    if planner == "cpsat":
        from planner.solver.cpsat import solve_cpsat

        left = time_limit_s if deterministic else max(LEAST_S * speed,
                                                      time_limit_s - (time.perf_counter() - t0))
        from planner.solver.speed import for_call

        with for_call(call_speed, call_build):
            result = solve_cpsat(problem, time_limit_s=left, deterministic=deterministic,
                                 workers=workers, seed=seed, last=last)
        candidate = result  # (with thrash.exempt_free_first applied: planner/solver/cpsat.py)
    else:
        from planner.heuristics.baselines import get_baseline

        # the greedy planner searches the tick as CP-SAT's strategies do, without what
        # needs no search (planner/core/reduce.py): its plan is the floor CP-SAT keeps
        # among its candidates; the Kubernetes- and Slurm-style baselines search every
        # job, as the schedulers they stand for
        detail = None
        if planner == "greedy":  # (the baselines keep the schedulers' own choices)
            from planner.core.decision import (
                best_fit,
                exempt_free_first,
                first_come,
                moved_note,
            )
            from planner.core.reduce import reduce_problem

            work, reduction = reduce_problem(problem)
            decision = get_baseline(planner)(work).solve()
            decision, moved = exempt_free_first(problem, decision)
            decision, _ = first_come(problem, decision)
            decision, _ = best_fit(problem, decision)
            detail = "; ".join(x for x in (reduction.note(), moved_note(moved) if moved else "")
                               if x) or None
        else:
            decision = get_baseline(planner)(problem).solve()
        candidate = assemble(problem, decision, "feasible",
                             SolverInfo(engine=planner, status="HEURISTIC", detail=detail))
    t_checks = time.perf_counter()  # planning ends, checking the plan starts (finish)
    if _valid(snap, exact(candidate)):
        return finish(candidate)
    if planner == "cpsat":  # the better greedy plan (CP-SAT's own fallback) comes next
        from planner.core.decision import clean, objective_of
        from planner.heuristics.greedy import GreedyPlanner

        best = max((clean(problem, GreedyPlanner(problem, spare_lower=s).solve())
                    for s in (True, False)), key=lambda d: objective_of(problem, d).key())
        greedy = assemble(problem, best, "fallback",
                          SolverInfo(engine="greedy", status="FALLBACK",
                                     detail="cpsat plan failed verification; greedy plan "
                                     "returned"))
        if _valid(snap, exact(greedy)):
            return finish(greedy)
    # never return a plan that breaks a rule: evict nothing, place on free GPUs only
    safe = assemble(problem, _free_only(problem), "fallback",
                    SolverInfo(engine="safe", status="FALLBACK",
                               detail=f"{planner} plan failed verification; evicting nothing"))
    if _valid(snap, exact(safe)):
        return finish(safe)
    return finish(exact(assemble(problem, Decision(), "fallback",
                                 SolverInfo(engine="safe", status="FALLBACK",
                                            detail="no valid plan found; evicting nothing"))))


def _bound(problem: Any, p: Plan, seconds: float, *, deterministic: bool, workers: int,
           seed: int) -> None:
    """``plan(bound_s=...)``: prove a bound on ``p`` (planner/solver/bound.py) and say it
    in ``p.solver``: ``gap`` and ``bound`` where the plan had none, ``status``
    ``optimal`` when the bound proves it, and ``detail``."""
    from planner.core.budget import Budget
    from planner.core.decision import decision_of
    from planner.core.reduce import reduce_problem
    from planner.solver.bound import prove

    # the relaxation of the tick without what needs no search (planner/core/reduce.py:
    # the same valid plans, so the same bound), unless the plan placed a job it drops
    work, _reduction = reduce_problem(problem)
    if any(pl.job not in work.pending for pl in p.placements):  # (never seen)
        work = problem
    res = prove(work, decision_of(work, p), Budget(seconds, wall=not deterministic),
                deterministic=deterministic, workers=workers, seed=seed)
    sv = p.solver
    if res.gap is not None and (sv.gap is None or res.proven or _telling(res, sv)):
        sv.gap = round(res.gap, 6)
        if res.cost_bound is not None:
            sv.bound = round(res.cost_bound, 6)
    if res.proven:
        p.status = "optimal"
    took = "" if deterministic else f" in {res.seconds:.2f} s"
    sv.detail = _with(sv.detail, res.said(
        took, traded="thrash.exempt_free_first" in (sv.detail or "")))


def _telling(res: Any, sv: SolverInfo) -> bool:
    """Does the relaxation's gap (``res``, a BoundResult) tell more than the one the plan
    has, at an item the planner named (``sv.gap_item``): at a later item, or at the
    same one and smaller? (Both bound every plan; where the plan's item is unknown,
    its own gap stands.)"""
    from planner.solver.bound import item_rank

    mine = None if sv.gap_item is None else item_rank(sv.gap_item)
    theirs = item_rank(res.items[-1][0]) if res.items else None
    if mine is None or theirs is None:
        return False
    return theirs > mine or (theirs == mine and sv.gap is not None and res.gap < sv.gap)


def _with(detail: str | None, sentence: str) -> str:
    """``solver.detail`` with one more sentence (after a "; " when it has some)."""
    return "; ".join(x for x in (detail, sentence) if x)


def _scaled(snap: Snapshot, scale: int) -> Snapshot:
    """``snap`` with every priority multiplied by ``scale`` (exact integers)."""
    jobs = [j.model_copy(update={"priority": scaled_priority(j.priority, scale)})
            for j in snap.jobs]
    return snap.model_copy(update={"jobs": jobs})  # (its lookups are made anew)


def _free_only(problem: Any) -> Any:
    from planner.core.problem import PendingInfo
    from planner.heuristics.greedy import GreedyPlanner

    no_rights = {k: PendingInfo(v.job, v.held_until, v.guarded, frozenset(), v.candidates,
                                v.need_nvlink) for k, v in problem.pending.items()}
    return GreedyPlanner(problem.with_pending(no_rights)).solve()


def _valid(snap: Snapshot, p: Plan) -> bool:
    try:
        from planner.checks.verify import verify
    except ImportError:  # pragma: no cover - verifier is part of the package
        return True
    return not verify(snap, p)
