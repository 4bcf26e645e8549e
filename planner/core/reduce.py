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

A flooded queue (a job array of tens of thousands of tasks) holds many jobs alike
for the search: of one *kind* (tier, GPUs per node, nodes, NVLink need, block and
domain wishes, rights, candidate nodes). No plan places more jobs of a kind than
its shards fit on its candidate nodes counting every GPU it could ever use there
(free, or held by an evictable job of a tier it may preempt); and of two jobs of a
kind, swapping a placed one for one more important (a higher priority, then first
in the queue: ``decision.first_come``'s order) keeps a plan valid and ranks it at
least as high. So some optimal plan places only jobs among the first that many of
each kind, and the others are deferred without a search: the reduced problem then
has the same optimum (not the same plans), and each plan of it is a plan of the
tick. A kind is cut only where it holds more than CUT_LEAST jobs (fewer cost the
search little), and never below that: a greedy search over every job of a kind
may, rarely, place a later job where an earlier one found no room (GPUs that
another job's victims left), which the cut kind no longer offers it.

The reduced problem is for the search only: the plan is assembled, explained and
verified with the tick's own problem, so that a job deferred here gets the same
reason as one the search deferred.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from planner.core.decision import queue_order
from planner.core.problem import PendingInfo, Problem

# a kind of pending job is cut to the most its shards could ever fit only where it
# holds more jobs than this, and never below it (module doc)
CUT_LEAST = 1000


@dataclass(frozen=True)
class Reduction:
    """What :func:`reduce_problem` took out: jobs that cannot start anywhere, and jobs
    left with free GPUs only (their candidate nodes cut to those where a shard fits
    on free GPUs)."""

    dropped: frozenset[str] = frozenset()
    free_only: frozenset[str] = frozenset()
    # jobs after the most of their kind any plan could place (the module doc)
    beyond: frozenset[str] = frozenset()

    def note(self) -> str:
        """For ``solver.detail`` (empty when nothing was dropped)."""
        said = []
        if self.dropped:
            said.append(f"{len(self.dropped)} pending job(s) could start on no node (free "
                        "GPUs only, by R13 or R15, and too few nodes with room): deferred "
                        "without a search")
        if self.beyond:
            said.append(f"{len(self.beyond)} pending job(s) came after the most jobs of "
                        "their kind that fit on their nodes, more important ones of the "
                        "kind first: deferred without a search")
        return "; ".join(said)


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


def reduce_problem(problem: Problem, *, narrow: bool = True) -> tuple[Problem, Reduction]:
    """The tick's problem without the jobs that cannot start, and with free-only jobs'
    candidate nodes cut to those with room (``problem`` itself when nothing
    changes); see the module doc. ``narrow=False``: the flooded kinds are cut, and
    nothing else is looked for (the pass over every pending job and the nodes with
    room for each shape of job that may take only free GPUs: 0.04 s at 12,500
    nodes)."""
    lists: dict[tuple, list[int]] = {}  # (candidates list, shape) -> nodes with room
    # (without narrowing, every job stays as it is: _beyond takes a copy to cut)
    pending: dict[str, PendingInfo] = {} if narrow else dict(problem.pending)
    dropped: list[str] = []
    narrowed: list[str] = []
    for jid, info in problem.pending.items() if narrow else ():
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
            pending[jid] = info.free_only(room)
            narrowed.append(jid)
        else:
            pending[jid] = info
    beyond = frozenset(_beyond(problem, pending))
    for jid in beyond:
        del pending[jid]
    if not dropped and not narrowed and not beyond:
        return problem, Reduction()
    problem.victims_by_node()  # (made once, for both: every greedy planner reads it)
    work = problem.with_pending(pending)
    return work, Reduction(frozenset(dropped), frozenset(narrowed) - beyond, beyond)


def _kind(info: PendingInfo) -> tuple:
    """What makes two pending jobs alike for the search (module doc)."""
    j = info.job
    return (j.tier, j.gpus_per_node, j.nodes, info.need_nvlink, j.same_block,
            j.same_nvlink_domain, info.rights, info.guarded, info.patient_until is not None,
            id(info.candidates))


def _rank(info: PendingInfo) -> tuple:
    """The order in which jobs of one kind are preferred: higher priority, then the
    queue's order (decision.first_come's)."""
    return (-info.job.priority, *queue_order(info.job))


def after_first(jobs: list[tuple[str, PendingInfo]], keep: int) -> list[str]:
    """The ids of ``jobs`` (id, job) past the first ``keep`` in the order of _rank:
    those of a priority below the ``keep``-th job's, and of that priority those past
    it in the queue's order (only they are put in order: sorting 8,000 jobs of a
    kind took most of the cut of 100,000 tasks)."""
    if len(jobs) <= keep:
        return []
    priority = [info.job.priority for _jid, info in jobs]  # (read once: scattered records)
    count = Counter(priority)
    above = 0  # jobs of a higher priority than ``last``
    for last in sorted(count, reverse=True):
        if above + count[last] >= keep:
            break
        above += count[last]
    tied = [pair for pair, p in zip(jobs, priority, strict=True) if p == last]
    tied.sort(key=lambda pair: _rank(pair[1]))
    out = [jid for jid, _info in tied[keep - above:]]
    out += [pair[0] for pair, p in zip(jobs, priority, strict=True) if p < last]
    return out


def _beyond(problem: Problem, pending: dict[str, PendingInfo]) -> list[str]:
    """The jobs of each kind of more than CUT_LEAST jobs after the most of the kind
    any plan could place (and after the first CUT_LEAST), in ``pending``."""
    if len(pending) <= CUT_LEAST:
        return []
    kinds: dict[tuple, list[tuple[str, PendingInfo]]] = defaultdict(list)
    for jid, info in pending.items():
        if info.held_until is None and info.candidates:
            kinds[_kind(info)].append((jid, info))
    big = [jobs for jobs in kinds.values() if len(jobs) > CUT_LEAST]
    if not big:
        return []
    on_node, vmask = problem.victims_by_node()  # (the evictable running jobs)
    running = problem.running
    out: list[str] = []
    for jobs in big:
        info = jobs[0][1]
        gpn, rights = info.job.gpus_per_node, info.rights
        shards = 0
        for ni in info.candidates:
            room = problem.nodes[ni].free
            for v in on_node.get(ni, ()):
                if running[v].job.tier in rights:
                    room |= vmask[(v, ni)]
            shards += room.bit_count() // gpn
        out += after_first(jobs, max(CUT_LEAST, shards // info.job.nodes))
    return out
