"""Slurm-style baseline: ``PreemptType=preempt/partition_prio`` with
``PreemptMode=REQUEUE``, tiers playing the partitions' ``PriorityTier``.

What Slurm does, and how it maps here:

- Queue order: partition ``PriorityTier``, then job priority, then submission
  (job id). Here: tier (1 first), then ``priority`` (higher first), then
  ``submitted_at`` (earlier first, unset last), then id; jobs in backoff (R9)
  wait.
- Preemptee candidates (``find_preemptable_jobs``): running jobs in partitions
  of a lower ``PriorityTier``; here evictable jobs (R5, R6 standing in for
  ``PreemptExemptTime``, R8, R11) of a tier the job's tier ``can_preempt``
  (R7). They are sorted by the plugin's key, ``PriorityTier << 16 | node count``
  ascending: lowest tier first (tier 3 before tier 2), then the jobs on the
  fewest nodes; ties go youngest first (latest ``started_at``, as
  ``PreemptParameters=youngest_first`` orders them), then id.
- The select plugin (``_run_now`` in cons_tres) removes candidates one at a
  time in that order from a simulated cluster, testing after each removal
  whether the job can start; the preemptees are then only the removed jobs
  whose resources the allocation actually uses. Here, node by node: the
  node's candidates are removed in the global order until the shard fits
  (free GPUs, GPUs already freed for its tier, and the removed ones), the GPUs
  are chosen by ``topology.best_fit`` (cons_tres packs the most loaded usable
  nodes first), and the victims are the removed jobs whose GPUs it uses.
- Node choice: fewest victims (what Slurm's re-sort passes, which move the last
  preemptee to the front and retry, aim at), then the node whose last victim
  comes earliest in the global order (Slurm's first pass stops at the shortest
  prefix of the candidate list that lets the job run), then best fit, then
  node id. Gangs take ``nodes`` nodes of one ``block``/``nvlink_domain`` group
  when asked, as in :class:`planner.baseline_k8s.PerNodeBaseline`.
- Rules Slurm does not know: a node whose victims would break the storm limit
  (R11/R12) or an eviction budget (R13) with this tick's other victims is
  skipped for the next one; with none left the job waits.
"""

from __future__ import annotations

import math

from planner.baseline_k8s import PerNodeBaseline
from planner.problem import PendingInfo, Problem


class SlurmPlanner(PerNodeBaseline):
    """Victims lowest tier first, then fewest nodes, then youngest; per node, the
    shortest prefix of that order that makes room."""

    name = "slurm"

    def __init__(self, problem: Problem):
        super().__init__(problem)
        order = sorted((v for v, info in problem.running.items() if info.evictable),
                       key=self.preempt_order)
        self.rank = {v: i for i, v in enumerate(order)}
        for ni in self.by_node:
            self.by_node[ni].sort(key=self.rank.__getitem__)

    def preempt_order(self, v: str) -> tuple:
        """Slurm's preemptee order: lowest tier first, fewest nodes, youngest, id."""
        job = self.p.running[v].job
        started = job.started_at.timestamp() if job.started_at is not None else math.inf
        return (-job.tier, job.nodes, -started, v)

    def victims_on_node(self, info: PendingInfo, ni: int, base: int,
                        cands: list[str], masks: dict[str, int]) -> list[str] | None:
        avail = base
        removed = []
        for v in cands:  # already in preemption order
            avail |= masks[v]
            removed.append(v)
            if self._fits(ni, avail, info):
                return removed
        return None

    def victims_key(self, victims: tuple[str, ...]) -> tuple:
        return (max((self.rank[v] for v in victims), default=-1),)
