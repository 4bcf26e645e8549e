"""Kubernetes-style baseline: kube-scheduler's default preemption, adapted to GPU jobs.

What kube-scheduler does (``DefaultPreemption`` plugin), and how it maps here:

- Queue order (``PrioritySort``): higher priority first, then earlier queue
  timestamp. Here: tier (1 first), then ``priority`` (higher first), then
  ``submitted_at`` (earlier first, unset last), then id. Jobs in backoff (R9)
  stay out of the queue.
- Scheduling without preemption: among the nodes where the job fits on GPUs
  available to it (free, or freed this tick by victims its tier may preempt),
  best fit: the node with the fewest available GPUs left over, then node id
  (``NodeResourcesFit`` with the ``MostAllocated`` strategy, the usual choice
  for GPU clusters; the default ``LeastAllocated`` would spread jobs and
  fragment NVLink islands). The GPUs are chosen by ``topology.best_fit``.
- Preemption, only when no node fits (``SelectVictimsOnNode``): on each
  candidate node, remove every running job the preemptor may preempt
  (evictable, R5/R6/R8/R11, and of a tier in its ``can_preempt``, R7); if the job
  does not fit even then, the node is out. Otherwise re-admit ("reprieve") the
  removed jobs from the most important down (lower tier, higher priority, older
  start, id) while the job still fits; those that could not be reprieved are
  the node's victims. Every victim is then needed: without it the job would not
  fit, so the placement uses some of its GPUs (R7).
- Node choice (``pickOneNodeForPreemption``), in kube-scheduler's order: no
  PodDisruptionBudget is violated here (the contract has none), so first the
  node whose most important victim is least important, then the smallest sum
  of the victims' priorities (each shifted to be positive, as upstream adds
  2^31, so that fewer victims weigh less), then the fewest victims, then the
  node whose most important victims started latest (the latest earliest start
  among them), then best fit and node id. A pod's priority here is its tier
  (tier 1 most important) and, within the tier, its ``priority``.
- Rules kube-scheduler does not know: a node whose victims would break the
  storm limit (R11/R12) or an eviction budget (R13) together with the victims
  already chosen this tick is skipped, and the next node tried; with none left
  the job waits.
- Gangs (no kube-scheduler equivalent; what a gang plugin on top of it does):
  the same per-node options, grouped by ``block``/``nvlink_domain`` when the
  job asks for ``same_block``/``same_nvlink_domain``; in each group the
  ``nodes`` best nodes are taken in node order, skipping any whose victims
  break R11-R13; the group with the fewest victims overall wins (then the same
  victim key, then group name).

:class:`PerNodeBaseline` holds what the Kubernetes and Slurm baselines share:
queue, per-node options, node choice, gangs and commits. Subclasses say how
victims are chosen on one node and how options are ranked.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from datetime import datetime

from planner.core import topology as topo
from planner.core.problem import PendingInfo, Problem
from planner.heuristics.greedy import GreedyPlanner, GreedyState, ShapeHeap

_TIER_SPAN = 4 * 10**9  # more than the range of in-tier priorities (+-10^9)
_SHIFT = 2 * 10**9  # makes every pod's priority positive (upstream adds 2^31)


def time_key(t: datetime | None) -> float:
    """Epoch seconds, unset = later than anything."""
    return t.timestamp() if t is not None else math.inf


@dataclass(frozen=True)
class NodeOption:
    """How a job could take one node: its victims there and the GPUs it would use."""

    ni: int
    victims: tuple[str, ...]
    mask: int | None  # GPUs the shard would use; None: not chosen yet (see avail)
    leftover: int  # GPUs available to the job on the node that it leaves unused
    avail: int = 0  # GPUs available to the job (free, freed, or freed by victims)


class PerNodeBaseline(GreedyPlanner):
    """Shared skeleton: one job at a time, victims chosen node by node."""

    name = "per-node"

    def __init__(self, problem: Problem):
        super().__init__(problem)
        # a node's option depends only on the node's state and the job's shape:
        # kept per shape and node until the node changes (see _current)
        self._kept: dict[tuple, dict[int, tuple[int, NodeOption | None]]] = {}
        self._queues: dict[tuple, ShapeHeap] = {}

    # -- hooks ----------------------------------------------------------------------
    def queue(self) -> list[PendingInfo]:
        """Pending jobs in scheduling order (jobs in backoff, R9, left out)."""
        def key(p: PendingInfo) -> tuple:
            return (p.job.tier, -p.job.priority, time_key(p.job.submitted_at), p.job.id)

        return sorted((p for p in self.p.pending.values() if p.held_until is None), key=key)

    def victims_on_node(self, info: PendingInfo, ni: int, base: int,
                        cands: list[str], masks: dict[str, int]) -> list[str] | None:
        """Victims among ``cands`` (allowed, on node ``ni``) that let the job fit there
        together with ``base`` (the GPUs already available to it); None if none do."""
        raise NotImplementedError

    def victims_key(self, victims: tuple[str, ...]) -> tuple:
        """Rank of a victim set among sets of the same size (smaller is preferred)."""
        raise NotImplementedError

    # -- options --------------------------------------------------------------------
    def free_option(self, st: GreedyState, info: PendingInfo, ni: int) -> NodeOption | None:
        """The job's option on node ``ni`` without victims: the GPUs available to it
        (free, or freed this tick by victims of tiers it may preempt) if it fits."""
        base = self.available(st, info, ni)
        if self.fits(ni, base, info):  # GPUs chosen only if this node is picked
            return NodeOption(ni, (), None, base.bit_count() - info.job.gpus_per_node, base)
        return None

    def option(self, st: GreedyState, info: PendingInfo, ni: int) -> NodeOption | None:
        """The job's option on node ``ni``: available GPUs if it fits, else victims."""
        free = self.free_option(st, info, ni)
        if free is not None:
            return free
        base = self.available(st, info, ni)
        if not info.rights:
            return None
        cands = [v for v in self.by_node.get(ni, ())
                 if v not in st.victims and self.p.running[v].job.tier in info.rights]
        if not cands:
            return None
        masks = {v: self.vmask[(v, ni)] for v in cands}
        victims = self.victims_on_node(info, ni, base, cands, masks)
        if not victims:
            return None
        avail = base
        for v in victims:
            avail |= masks[v]
        opt = self._option(info, ni, avail, tuple(victims))
        mask = opt.mask
        assert mask is not None  # (_option chooses the shard's GPUs)
        # keep only victims whose GPUs the shard really uses (R7: no idle eviction)
        used = tuple(v for v in opt.victims if masks[v] & mask)
        return opt if used == opt.victims else NodeOption(ni, used, opt.mask, opt.leftover,
                                                          opt.avail)

    def _option(self, info: PendingInfo, ni: int, avail: int,
                victims: tuple[str, ...]) -> NodeOption:
        mask = self.best_fit_gpus(info, ni, avail)
        return NodeOption(ni, victims, mask, avail.bit_count() - info.job.gpus_per_node, avail)

    def best_fit_gpus(self, info: PendingInfo, ni: int, avail: int) -> int:
        """The GPUs ``topology.best_fit`` picks for one shard among ``avail``."""
        mask = topo.layout_best_fit(self.p.nodes[ni].layout, avail, info.job.gpus_per_node,
                                    info.need_nvlink)
        assert mask is not None
        return mask

    def _mask(self, info: PendingInfo, o: NodeOption) -> int:
        return o.mask if o.mask is not None else self.best_fit_gpus(info, o.ni, o.avail)

    def option_key(self, o: NodeOption) -> tuple:
        return (len(o.victims), self.victims_key(o.victims), o.leftover,
                self.p.nodes[o.ni].node.id)

    def limits_allow(self, st: GreedyState, new: list[str]) -> bool:
        """The storm limit (R11/R12) and the budgets (R13) hold with ``new`` added."""
        return not new or self.within_limits(st, new)

    # -- the options of a job shape ---------------------------------------------------
    def _current(self, st: GreedyState, info: PendingInfo, ni: int,
                 kept: dict[int, tuple[int, NodeOption | None]]) -> NodeOption | None:
        """:meth:`option`, kept until node ni changes (its version in the state)."""
        ver = st.version.get(ni, 0)
        hit = kept.get(ni)
        if hit is None or hit[0] != ver:
            hit = kept[ni] = (ver, self.option(st, info, ni))
        return hit[1]

    @staticmethod
    def _shape(info: PendingInfo) -> tuple:
        """What a node's option depends on besides the node: the job's shape and rights."""
        return (info.job.gpus_per_node, info.need_nvlink, info.rights)

    def _ranked(self, st: GreedyState, info: PendingInfo) -> list[NodeOption]:
        """Every candidate node's option, best first (``option_key``)."""
        kept = self._kept.setdefault(self._shape(info), {})
        out = [o for ni in info.candidates if (o := self._current(st, info, ni, kept)) is not None]
        out.sort(key=self.option_key)
        return out

    def _best_allowed(self, st: GreedyState, info: PendingInfo) -> NodeOption | None:
        """The first option of :meth:`_ranked` that the storm limit and the budgets
        allow, from a lazy heap per job shape: only nodes changed since the shape's
        last job are scored again (from the state's change log). An option they do
        not allow is dropped for good, since storm loads and evictions only grow
        while a plan is built. Same answer as scanning every node, about 10x faster
        at 4,096 nodes."""
        shape = self._shape(info)
        kept = self._kept.setdefault(shape, {})
        # where the budgets refuse any victim more (GreedyPlanner.evictions_closed;
        # they only tighten while a plan is built), only options without victims can
        # be allowed, and they rank first (option_key): a queue of those alone gives
        # the same answer without working out the victims of every node
        closed = bool(info.rights) and self.evictions_closed(st)
        # (R15 refuses victims of jobs whose tier is not exempt that it allows others)
        qkey = (*shape, id(info.candidates), self.placing_exempt, closed)
        q = self._queues.get(qkey)
        if q is None:
            q = self._queues[qkey] = ShapeHeap(
                members=frozenset(info.candidates))
            todo: list[int] = info.candidates
        else:
            todo = sorted(set(st.log[q.pos:]) & q.members)
        q.pos = len(st.log)
        for ni in todo:
            o = self.free_option(st, info, ni) if closed else self._current(st, info, ni, kept)
            if o is not None:  # the key ends with the node id: entries never tie
                heapq.heappush(q.heap, (self.option_key(o), st.version.get(ni, 0), o))
        while q.heap:
            _key, ver, o = q.heap[0]
            if ver == st.version.get(o.ni, 0) and self.limits_allow(st, list(o.victims)):
                return o  # stays: placing the job changes the node, which makes it stale
            heapq.heappop(q.heap)
        return None

    # -- placing one job ------------------------------------------------------------
    def place(self, st: GreedyState, info: PendingInfo) -> list[tuple[int, int]] | None:
        self.placing(info)
        if info.job.nodes == 1:
            o = self._best_allowed(st, info)
            if o is None:
                return None
            self.evict(st, list(o.victims))
            return [(o.ni, self.commit(st, o.ni, self._mask(info, o)))]
        options = self._ranked(st, info)
        groups: dict[tuple, list[NodeOption]] = {}
        for o in options:
            groups.setdefault(self.group_key(info, o.ni), []).append(o)
        best: tuple[tuple, list[NodeOption], list[str]] | None = None
        for gkey in sorted(groups, key=str):
            chosen: list[NodeOption] = []
            new: list[str] = []
            for o in groups[gkey]:
                extra = [v for v in o.victims if v not in new]
                if self.limits_allow(st, new + extra):
                    chosen.append(o)
                    new += extra
                    if len(chosen) == info.job.nodes:
                        break
            if len(chosen) < info.job.nodes:
                continue
            score = (len(new), self.victims_key(tuple(new)), str(gkey))
            if best is None or score < best[0]:
                best = (score, chosen, new)
        if best is None:
            return None
        _score, chosen, new = best
        self.evict(st, new)
        return [(o.ni, self.commit(st, o.ni, self._mask(info, o))) for o in chosen]

    def commit(self, st: GreedyState, ni: int, mask: int) -> int:
        self.occupy(st, ni, mask)  # also marks the node changed for the kept options
        return mask


class K8sPlanner(PerNodeBaseline):
    """kube-scheduler default preemption: remove all lower tiers, reprieve the most
    important back, take the node with the fewest victims."""

    name = "k8s"

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self._importance: dict[str, tuple] = {}

    def importance(self, v: str) -> tuple:
        """Most important first: lower tier, higher priority, older start, id."""
        key = self._importance.get(v)
        if key is None:
            job = self.p.running[v].job
            key = self._importance[v] = (job.tier, -job.priority, time_key(job.started_at), v)
        return key

    def victims_on_node(self, info: PendingInfo, ni: int, base: int,
                        cands: list[str], masks: dict[str, int]) -> list[str] | None:
        avail = base
        for v in cands:
            avail |= masks[v]
        if not self.fits(ni, avail, info):
            return None
        victims = []
        for v in sorted(cands, key=self.importance):  # reprieve, most important first
            if self.fits(ni, avail & ~masks[v], info):
                avail &= ~masks[v]
            else:
                victims.append(v)
        return victims

    def victims_key(self, victims: tuple[str, ...]) -> tuple:
        """The most important victim should be as unimportant as possible."""
        if not victims:
            return (0, 0)
        top = min(victims, key=self.importance)
        job = self.p.running[top].job
        return (-job.tier, job.priority)

    def _scalar(self, v: str) -> float:
        """A pod priority as one integer (larger is more important): tiers apart by
        more than any in-tier priority (+-10^9), shifted to be positive."""
        job = self.p.running[v].job
        return (len(self.p.policy.tiers) + 1 - job.tier) * _TIER_SPAN + job.priority + _SHIFT

    def option_key(self, o: NodeOption) -> tuple:
        """pickOneNodeForPreemption: lowest highest-priority victim, smallest sum of
        priorities, fewest victims, latest start of the highest-priority victims;
        then (and for nodes without victims) best fit, node id."""
        node = self.p.nodes[o.ni].node.id
        if not o.victims:
            return (0, (), 0, 0, 0, o.leftover, node)
        top = self.victims_key(o.victims)
        best = [v for v in o.victims if self.victims_key((v,)) == top]
        earliest = min(time_key(self.p.running[v].job.started_at) for v in best)
        return (1, top, sum(self._scalar(v) for v in o.victims), len(o.victims), -earliest,
                o.leftover, node)
