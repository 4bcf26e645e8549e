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
- Node choice (``pickOneNodeForPreemption``): fewest victims, then the node
  whose most important victim is least important (highest tier number, then
  lowest priority), then best fit, then node id. (kube-scheduler itself ranks
  the most important victim before the number of victims; we follow the
  project's brief, fewest victims first.)
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

import math
from dataclasses import dataclass
from datetime import datetime

from planner import topology as topo
from planner.greedy import GreedyPlanner, _State
from planner.problem import PendingInfo, Problem


def _ts(t: datetime | None) -> float:
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

    # -- hooks ----------------------------------------------------------------------
    def queue(self) -> list[PendingInfo]:
        """Pending jobs in scheduling order (jobs in backoff, R9, left out)."""
        def key(p: PendingInfo) -> tuple:
            return (p.job.tier, -p.job.priority, _ts(p.job.submitted_at), p.job.id)

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
    def option(self, st: _State, info: PendingInfo, ni: int) -> NodeOption | None:
        """The job's option on node ``ni``: available GPUs if it fits, else victims."""
        base = self._avail(st, info, ni)
        if self._fits(ni, base, info):  # GPUs chosen only if this node is picked
            return NodeOption(ni, (), None, base.bit_count() - info.job.gpus_per_node, base)
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
        # keep only victims whose GPUs the shard really uses (R7: no idle eviction)
        used = tuple(v for v in opt.victims if masks[v] & opt.mask)
        return opt if used == opt.victims else NodeOption(ni, used, opt.mask, opt.leftover,
                                                          opt.avail)

    def _option(self, info: PendingInfo, ni: int, avail: int,
                victims: tuple[str, ...]) -> NodeOption:
        mask = self._gpus(info, ni, avail)
        return NodeOption(ni, victims, mask, avail.bit_count() - info.job.gpus_per_node, avail)

    def _gpus(self, info: PendingInfo, ni: int, avail: int) -> int:
        """The GPUs ``topology.best_fit`` picks for one shard among ``avail``."""
        mask = topo.layout_best_fit(self.p.nodes[ni].layout, avail, info.job.gpus_per_node,
                                    info.need_nvlink)
        assert mask is not None
        return mask

    def _mask(self, info: PendingInfo, o: NodeOption) -> int:
        return o.mask if o.mask is not None else self._gpus(info, o.ni, o.avail)

    def option_key(self, o: NodeOption) -> tuple:
        return (len(o.victims), self.victims_key(o.victims), o.leftover,
                self.p.nodes[o.ni].node.id)

    def _allowed(self, st: _State, new: list[str]) -> bool:
        """The storm limit (R11/R12) and the budgets (R13) hold with ``new`` added."""
        return not new or (self._storm_ok(st, new) and self._budget_ok(st, new))

    # -- placing one job ------------------------------------------------------------
    def place(self, st: _State, info: PendingInfo) -> list[tuple[int, int]] | None:
        options = [o for ni in info.candidates if (o := self.option(st, info, ni)) is not None]
        options.sort(key=self.option_key)
        if info.job.nodes == 1:
            for o in options:
                if self._allowed(st, list(o.victims)):
                    self._evict(st, list(o.victims))
                    return [(o.ni, self._commit(st, o.ni, self._mask(info, o)))]
            return None
        groups: dict[tuple, list[NodeOption]] = {}
        for o in options:
            groups.setdefault(self._group_key(info, o.ni), []).append(o)
        best: tuple[tuple, list[NodeOption], list[str]] | None = None
        for gkey in sorted(groups, key=str):
            chosen: list[NodeOption] = []
            new: list[str] = []
            for o in groups[gkey]:
                extra = [v for v in o.victims if v not in new]
                if self._allowed(st, new + extra):
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
        self._evict(st, new)
        return [(o.ni, self._commit(st, o.ni, self._mask(info, o))) for o in chosen]

    def _commit(self, st: _State, ni: int, mask: int) -> int:
        st.free[ni] = st.free.get(ni, 0) & ~mask
        for vid in st.freed.get(ni, {}):
            st.freed[ni][vid] &= ~mask
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
            key = self._importance[v] = (job.tier, -job.priority, _ts(job.started_at), v)
        return key

    def victims_on_node(self, info: PendingInfo, ni: int, base: int,
                        cands: list[str], masks: dict[str, int]) -> list[str] | None:
        avail = base
        for v in cands:
            avail |= masks[v]
        if not self._fits(ni, avail, info):
            return None
        victims = []
        for v in sorted(cands, key=self.importance):  # reprieve, most important first
            if self._fits(ni, avail & ~masks[v], info):
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
