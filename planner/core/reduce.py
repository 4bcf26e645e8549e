"""The part of a tick that needs no search: pending jobs no plan can start, and the
nodes a job can only use for its free GPUs.

A pending job may use the GPUs of victims of the tiers it may preempt (its
``rights``). Where every such victim would break a rule whatever else the plan
does, the job may in fact only take GPUs free in the snapshot:

- R13: ``max_evictions_per_tick`` 0, or ``max_evicted_gpu_fraction`` of the
  cluster below one GPU: no plan has a victim;
- R15 with ``thrash.exempt_if: all`` (the default), for a job of a tier that is not
  exempt: any victim whose GPUs it uses is not exempt, and the window has nothing
  left for one (``left <= 0``, or fewer GPUs left than one).

(R10 and R16 already leave such jobs without rights when the problem is built.)
Such a job can only go to nodes where one shard fits on the node's free GPUs, and
no plan places it when fewer nodes than its shards allow that: it is deferred
without a search. The reduced problem keeps every other job as it was; it has the
same valid plans, so the same optimum, and each plan of it is a plan of the
tick. On a cluster whose eviction window is spent (a busy cluster between bursts)
most of a long queue falls here, and what is left is small enough for the whole
model (docs/planner.md, section 1a).

The reduced problem is for the search only: the plan is assembled, explained and
verified with the tick's own problem, so that a job deferred here gets the same
reason as one the search deferred.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.core.problem import PendingInfo, Problem


@dataclass(frozen=True)
class Reduction:
    """What :func:`reduce_problem` took out: jobs that cannot start anywhere, and jobs
    left with free GPUs only (their candidate nodes cut to those where a shard fits
    on free GPUs)."""

    dropped: frozenset[str] = frozenset()
    free_only: frozenset[str] = frozenset()

    def note(self) -> str:
        """For ``solver.detail`` (empty when nothing was dropped)."""
        if not self.dropped:
            return ""
        return (f"{len(self.dropped)} pending job(s) could start on no node (free GPUs "
                "only, by R13 or R15, and too few nodes with room): deferred without a "
                "search")


def no_victims_for(problem: Problem, info: PendingInfo) -> bool:
    """May the job take only GPUs free in the snapshot, whatever the plan (R13, R15;
    see the module doc)?"""
    if not info.rights:
        return True
    pol = problem.policy
    if pol.max_evictions_per_tick == 0:
        return True
    frac = pol.max_evicted_gpu_fraction
    if frac is not None and frac * problem.total_gpus_up_drain < 1:
        return True
    tb = problem.thrash
    return (tb is not None and tb.exempt_all and not problem.exempt(info.job.tier)
            and (tb.left <= 0 or tb.gpus_left < 1))


def reduce_problem(problem: Problem) -> tuple[Problem, Reduction]:
    """The tick's problem without the jobs that cannot start, and with free-only jobs'
    candidate nodes cut to those with room (``problem`` itself when nothing
    changes); see the module doc."""
    lists: dict[tuple, list[int]] = {}  # (candidates list, shape) -> nodes with room
    pending: dict[str, PendingInfo] = {}
    dropped: list[str] = []
    narrowed: list[str] = []
    for jid, info in problem.pending.items():
        if info.held_until is not None or not no_victims_for(problem, info):
            pending[jid] = info
            continue
        gpn, need = info.job.gpus_per_node, info.need_nvlink
        key = (id(info.candidates), gpn, need)
        room = lists.get(key)
        if room is None:
            fits = problem.free_fits(gpn, need)
            room = lists[key] = [ni for ni in info.candidates if fits[ni]]
        if len(room) < info.job.nodes:
            dropped.append(jid)
            continue
        if info.rights or len(room) < len(info.candidates):
            pending[jid] = replace(info, rights=frozenset(), candidates=room)
            narrowed.append(jid)
        else:
            pending[jid] = info
    if not dropped and not narrowed:
        return problem, Reduction()
    problem.victims_by_node()  # (made once, for both: every greedy planner reads it)
    work = problem.with_pending(pending)
    return work, Reduction(frozenset(dropped), frozenset(narrowed))
