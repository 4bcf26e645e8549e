"""Slurm-style baseline: ``PreemptType=preempt/partition_prio`` (or ``preempt/qos``)
with ``PreemptMode=REQUEUE`` and ``SelectType=select/cons_tres``, tiers playing the
partitions' ``PriorityTier`` (or the QOS priorities).

What Slurm documents (slurm.conf(5) ``PreemptParameters``; preempt.html, "Preemption
Design and Operation"), and how it maps here:

- Queue order: partition ``PriorityTier``, then job priority. Here: tier (1 first),
  then ``priority`` (higher first), then ``submitted_at`` (earlier first, unset
  last), then id. Jobs in backoff (R9) wait; every other job is tried in turn
  (as backfill would, without reserving GPUs for a job that must wait).
- "The select plugin will determine if the pending job can start without
  preempting any jobs and if so, starts the job using available resources."
  Here: on GPUs free or freed this tick for its tier, best fit (the node with the
  fewest available GPUs left over, then node id; for a gang, the first
  ``block``/``nvlink_domain`` group that holds ``nodes`` such nodes).
- "The select plugin is passed an ordered list of preemptable jobs": running jobs
  the job may preempt (the preempt plugin's candidates; here evictable, R5, R6
  standing in for ``PreemptExemptTime``, R8, R11, R17, of a tier the job's tier
  ``can_preempt``, R7, with GPUs on a node that could host it). The list is
  sorted by the plugin's key, ascending: ``PriorityTier`` (preempt/partition_prio)
  or QOS priority (preempt/qos), shifted left 16 bits, plus the job's node count,
  "to favor preempting smaller jobs": here the highest tier number first, then
  the fewest nodes. With ``youngest_first`` (``PreemptParameters=youngest_first``,
  or ``SchedulerParameters=preempt_youngest_first``) the list is sorted "by the
  job start times to favor preempting younger jobs over older" instead: latest
  ``started_at`` first, tier and size ignored (an unknown start sorts last, as
  the oldest). Neither key looks at age otherwise. Equal keys: Slurm's sort
  (libc ``qsort``) leaves them in an order it does not define, in practice that of
  its job list, which is submission order; here earlier ``submitted_at`` first
  (unset last), then id.
- "Otherwise, the select plugin will simulate the preemption of each job in the
  priority ordered list and test if the job can be started after each
  preemption." Here the candidates' GPUs are added, one job at a time in that
  order, to the GPUs available to the job, and after each the job is tested on
  the candidate's nodes (a gang: on every node of the group). When it fits, the
  nodes are chosen as above among those where it now fits.
- "The preemption candidates are re-ordered with the final job requiring
  preemption placed first in the list and all of the other jobs to be preempted
  ordered by the number of nodes in their allocation which overlap the resources
  selected for the pending job", and the simulation repeated. ``reorder_count``
  (default 1) bounds the repetitions as cons_tres counts them: the search stops
  after a pass that is number ``reorder_count + 2``, or number ``k`` when there are
  no more than ``k`` candidates, so the default allows two reorderings. With
  ``strict_order`` the final job is moved to the front and the others keep their
  order. The last pass's result is used, better or not. Here the re-sort is
  stable (Slurm's is not).
- "The jobs to be preempted": the candidates removed in the last pass whose
  allocation overlaps the nodes selected. Here (R7: no eviction whose GPUs go
  unused) only those whose GPUs the job uses.

What it simplifies: ``PreemptMode=SUSPEND``/``GANG``, ``PreemptMode=PRIORITY``,
``WITHIN``, ``min_exempt_priority``, licenses and reservations are not modelled
(the contract's evictions are requeues, and who may preempt whom is its tiers'
``can_preempt``); node weights and cons_tres's node ordering are replaced by the
best fit above; jobs are placed one at a time within this tick.

Rules Slurm does not know: a candidate whose eviction alone would break the storm
limit (R11/R12) or an eviction budget (R13, R15) together with this tick's other
victims is left out of the list, as Slurm leaves out jobs exempt from preemption;
when the victims found together break one, the nodes holding them are left out and
the search repeated (with none left the job waits).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from planner.core.problem import PendingInfo, Problem
from planner.heuristics.baseline_k8s import NodeOption, PerNodeBaseline, time_key
from planner.heuristics.greedy import GreedyState

_MAX_NODES = 0xFFFF  # the plugins cap the node count they add to the key at 16 bits


class _Candidates:
    """The ordered candidate list of one search: a re-ordered head and the rest of
    the global order, read lazily (the search usually stops after a few jobs)."""

    def __init__(self, rest: Iterator[str]):
        self.items: list[str] = []
        self._rest = rest

    def has(self, i: int) -> bool:
        """Is there an ``i``-th candidate (0-based)?"""
        while len(self.items) <= i:
            nxt = next(self._rest, None)
            if nxt is None:
                return False
            self.items.append(nxt)
        return True


class SlurmPlanner(PerNodeBaseline):
    """Slurm's select plugin with preemption: the shortest prefix of the preempt
    plugin's ordered candidates that lets the job start, re-ordered and tried again
    ``reorder_count`` + 1 times."""

    name = "slurm"

    def __init__(self, problem: Problem, *, youngest_first: bool = False,
                 reorder_count: int = 1, strict_order: bool = False):
        super().__init__(problem)
        if isinstance(reorder_count, bool) or not isinstance(reorder_count, int) \
                or reorder_count < 0:
            raise ValueError(f"reorder_count must be an integer >= 0, not {reorder_count!r}")
        self.youngest_first = youngest_first
        self.reorder_count = reorder_count
        self.strict_order = strict_order
        self.preempt_order = sorted((v for v, info in problem.running.items() if info.evictable),
                            key=self.preempt_key)
        self._usable: dict[int, frozenset[int]] = {}
        self._by_rights: dict[tuple, tuple[GreedyState, list[tuple[str, tuple[int, ...]]]]] = {}
        self._stale: dict[tuple, int] = {}  # entries of _by_rights seen to be no candidates
        self._alone: dict[tuple[str, bool], tuple[GreedyState, int, bool]] = {}
        self._base_avail: dict[int, int] = {}  # see _base

    def preempt_key(self, v: str) -> tuple:
        """The preempt plugin's sort key (smaller is preempted first), then
        submission order and id for equal keys."""
        job = self.p.running[v].job
        ties = (time_key(job.submitted_at), v)
        if self.youngest_first:
            started = job.started_at.timestamp() if job.started_at is not None else -math.inf
            return (-started, *ties)
        return (-job.tier, min(job.nodes, _MAX_NODES), *ties)

    # -- PerNodeBaseline hooks: only options without victims go through them ---------
    def option(self, st: GreedyState, info: PendingInfo, ni: int) -> NodeOption | None:
        return self.free_option(st, info, ni)

    def victims_key(self, victims: tuple[str, ...]) -> tuple:
        return ()

    # -- placing one job ------------------------------------------------------------
    def place(self, st: GreedyState, info: PendingInfo) -> list[tuple[int, int]] | None:
        parts = super().place(st, info)  # without preempting (also calls placing())
        if parts is not None or not info.rights:
            return parts
        key = id(info.candidates)
        usable = self._usable.get(key)
        if usable is None:
            usable = self._usable[key] = frozenset(info.candidates)
        while usable:
            found = self._run_now(st, info, usable)
            if found is None:
                return None
            parts, victims = found
            if self.limits_allow(st, victims):
                self.evict(st, victims)
                return [(ni, self.commit(st, ni, mask)) for ni, mask in parts]
            # together they break a limit Slurm does not know: skip their nodes
            usable = usable - {ni for ni, mask in parts
                               if any(self.vmask.get((v, ni), 0) & mask for v in victims)}
        return None

    def _run_now(self, st: GreedyState, info: PendingInfo, usable: frozenset[int]
                 ) -> tuple[list[tuple[int, int]], list[str]] | None:
        """cons_tres's search with preemption: (the job's nodes and GPUs, its victims),
        or None if it does not fit even with every candidate removed."""
        def rest() -> Iterator[str]:
            victims, whole = st.victims, usable is self._usable.get(id(info.candidates))
            key, ordered = self._ordered(st, info, usable if whole else None)
            for v, nodes in ordered:
                if (v not in victims and (whole or not usable.isdisjoint(nodes))
                        and self._alone_ok(st, v)):
                    yield v
                elif whole:
                    self._stale[key] = self._stale.get(key, 0) + 1

        cands = _Candidates(rest())
        self._base_avail = {}
        start = self._start(st, info, usable) if info.job.nodes > 1 else None
        passes = 0
        while True:
            hit = self._simulate(st, info, usable, cands, start)
            if hit is None:
                return None  # (only in the first pass: later ones re-order the same jobs)
            k, parts = hit
            done = passes > self.reorder_count or not cands.has(passes + 1)
            passes += 1
            if done:
                break
            head = cands.items[:k + 1]
            crit = head.pop()
            if not self.strict_order:  # by overlap with the chosen nodes (stable)
                chosen = {ni for ni, _m in parts}
                head.sort(key=lambda v: -sum(1 for ni, _m in self.p.running[v].parts
                                             if ni in chosen))
            cands.items[:k + 1] = [crit, *head]
        victims = [v for v in cands.items[:k + 1]
                   if any(self.vmask.get((v, ni), 0) & mask for ni, mask in parts)]
        return parts, victims

    def _ordered(self, st: GreedyState, info: PendingInfo, usable: frozenset[int] | None
                 ) -> tuple[tuple, list[tuple[str, tuple[int, ...]]]]:
        """The global order restricted to the tiers the job may preempt, with each
        job's nodes; with ``usable`` (all the job's candidate nodes) also to the jobs
        on one of them, kept per job shape for this plan (``st``) and without, once
        they are many, the jobs that can no longer be candidates (victims, and jobs
        whose eviction alone a limit refused: both only grow while a plan is built)."""
        key = (info.rights, None if usable is None else id(info.candidates),
               self.placing_exempt)
        hit = self._by_rights.get(key)
        if hit is not None and hit[0] is st:
            got = hit[1]
            if self._stale.get(key, 0) > len(got) // 4:
                flag = self.placing_exempt
                got = [(v, nodes) for v, nodes in got if v not in st.victims and not (
                    (h := self._alone.get((v, flag))) is not None and h[0] is st and not h[2])]
                self._by_rights[key] = (st, got)
                self._stale[key] = 0
            return key, got
        running, rights = self.p.running, info.rights
        got = [(v, tuple(ni for ni, _m in running[v].parts))
               for v in self.preempt_order if running[v].job.tier in rights]
        if usable is not None:
            got = [(v, nodes) for v, nodes in got if not usable.isdisjoint(nodes)]
        self._by_rights[key] = (st, got)
        self._stale[key] = 0
        return key, got

    def _alone_ok(self, st: GreedyState, v: str) -> bool:
        """Would evicting ``v`` alone, with this tick's victims, keep R11-R13 and R15?
        Kept until the victims change; a refusal is final (loads and counts only
        grow while a plan is built)."""
        key = (v, self.placing_exempt)
        hit = self._alone.get(key)
        if hit is not None and hit[0] is st and (not hit[2] or hit[1] == st.epoch):
            return hit[2]
        ok = self.limits_allow(st, [v])
        self._alone[key] = (st, st.epoch, ok)
        return ok

    def _start(self, st: GreedyState, info: PendingInfo, usable: frozenset[int]
               ) -> dict[tuple, set[int]]:
        """For a gang, the nodes where a shard fits before any candidate is removed,
        per group (and the GPUs available on every usable node, in ``base``)."""
        fitting: dict[tuple, set[int]] = {}
        gpn = info.job.gpus_per_node
        for ni in usable:
            a = self._base(st, info, ni)
            if a.bit_count() >= gpn and self.fits(ni, a, info):
                fitting.setdefault(self.group_key(info, ni), set()).add(ni)
        return fitting

    def _base(self, st: GreedyState, info: PendingInfo, ni: int) -> int:
        """The GPUs available to the job on node ni before any candidate is removed
        (kept for the passes of one search)."""
        a = self._base_avail.get(ni)
        if a is None:
            a = self._base_avail[ni] = self.available(st, info, ni)
        return a

    def _simulate(self, st: GreedyState, info: PendingInfo, usable: frozenset[int],
                  cands: _Candidates, start: dict[tuple, set[int]] | None
                  ) -> tuple[int, list[tuple[int, int]]] | None:
        """Remove the candidates in list order until the job fits: (the index of the
        last one removed, the job's nodes and GPUs), or None. ``start``: for a gang,
        the nodes that fit before (see _start); None for one node."""
        avail: dict[int, int] = {}
        need = info.job.nodes
        fitting = None if start is None else {g: set(ns) for g, ns in start.items()}
        gpn, running = info.job.gpus_per_node, self.p.running
        i = 0
        while cands.has(i):
            v = cands.items[i]
            new: list[int] = []
            for ni, m in running[v].parts:
                if ni not in usable:
                    continue
                a = avail.get(ni)
                a = avail[ni] = (self._base(st, info, ni) if a is None else a) | m
                if a.bit_count() >= gpn and self.fits(ni, a, info):  # (count first: fast)
                    new.append(ni)
            if new and fitting is None:
                ni = min(new, key=lambda n: self._fit_key(info, n, avail[n]))
                return i, [(ni, self.best_fit_gpus(info, ni, avail[ni]))]
            if new and fitting is not None:
                groups = set()
                for ni in new:
                    g = self.group_key(info, ni)
                    fitting.setdefault(g, set()).add(ni)
                    groups.add(g)
                full = sorted((g for g in groups if len(fitting[g]) >= need), key=str)
                if full:
                    def key(n: int) -> tuple:
                        return self._fit_key(info, n, avail.get(n, self._base(st, info, n)))
                    nodes = sorted(sorted(fitting[full[0]], key=key)[:need])
                    return i, [(ni, self.best_fit_gpus(info, ni, avail.get(ni, self._base(st, info, ni))))
                               for ni in nodes]
            i += 1
        return None

    def _fit_key(self, info: PendingInfo, ni: int, avail: int) -> tuple:
        """Best fit: fewest available GPUs left over, then node id."""
        return (avail.bit_count() - info.job.gpus_per_node, self.p.nodes[ni].node.id)
