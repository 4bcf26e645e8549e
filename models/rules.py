"""Per-job rule arithmetic of the contract (R2, R6, R8-R12, objective item 4).

Shared by the planner, the verifier and the simulator so that the formulas are
written once; tests check them against hand-computed numbers.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from models.policy import Policy
from models.snapshot import Job, Node, Snapshot, Storage, age_s


def victim_storage(snap: Snapshot, job: Job, nodes: dict[str, Node] | None = None
                   ) -> Storage | None:
    """Storage target of a running job: that of its first placement node (section 7)."""
    if not job.placement:
        return None
    node = (nodes if nodes is not None else snap.node_map()).get(job.placement[0].node)
    return None if node is None else snap.storage_of(node)


def local_flush_s(nodes: dict[str, Node], job: Job) -> float:
    """Largest ``shard / local_write_gb_per_s`` over the job's nodes that set one."""
    if not job.placement:
        return 0.0
    shard = job.checkpoint.size_gb / job.nodes
    worst = 0.0
    for part in job.placement:
        node = nodes.get(part.node)
        if node is not None and node.local_write_gb_per_s:
            worst = max(worst, shard / node.local_write_gb_per_s)
    return worst


def flushes(job: Job) -> bool:
    """A victim flushes a checkpoint iff it has a signal (R11)."""
    return job.checkpoint.signal is not None


def flush_s(job: Job, storage: Storage | None, storage_load_gb: float, local_s: float) -> float:
    """R12's ``flush_s(v)`` given the total flush ``F_s`` on its storage target."""
    if not flushes(job):
        return 0.0
    shared = storage_load_gb / storage.write_gb_per_s if storage is not None else 0.0
    return max(shared, local_s)


def need_s(policy: Policy, job: Job, flush: float) -> float:
    """R12's required grace ``need(v)``; exactly ``min_s`` without a signal."""
    if not flushes(job):
        return float(policy.grace.min_s)
    return policy.grace.need(flush, job.checkpoint.barrier_s, job.checkpoint.cleanup_s)


def solo_flush_s(snap: Snapshot, job: Job, nodes: dict[str, Node] | None = None,
                 known: tuple[Storage | None, float] | None = None) -> float:
    """The flush time the victim would need alone (objective item 4); ``known``: its
    ``victim_storage`` and ``local_flush_s``, when the caller has them."""
    if not flushes(job):
        return 0.0
    if known is None:
        nodes = nodes if nodes is not None else snap.node_map()
        known = victim_storage(snap, job, nodes), local_flush_s(nodes, job)
    return flush_s(job, known[0], job.checkpoint.size_gb, known[1])


def lost_s(now: datetime, job: Job) -> float:
    """Progress lost on eviction: 0 with a signal, else time since the last checkpoint."""
    if flushes(job):
        return 0.0
    return max(0.0, age_s(now, job.checkpoint.last_at or job.started_at))


def eviction_cost(snap: Snapshot, job: Job, nodes: dict[str, Node] | None = None,
                  known: tuple[Storage | None, float] | None = None) -> float:
    """Objective item 4: ``gpus * (lost + restore + solo_flush)`` in GPU-seconds
    (``known`` as for :func:`solo_flush_s`)."""
    return cost_of(snap.now, job, solo_flush_s(snap, job, nodes, known))


def cost_of(now: datetime, job: Job, solo_flush: float) -> float:
    """:func:`eviction_cost` given the victim's ``solo_flush_s`` (which does not depend
    on ``now``)."""
    return job.total_gpus * (lost_s(now, job) + job.checkpoint.restore_s + solo_flush)


def immune_for_s(policy: Policy, now: datetime, job: Job) -> float:
    """Seconds of R6 immunity left (0 when evictable by age)."""
    left = policy.tier(job.tier).min_runtime_s - age_s(now, job.started_at)
    return max(0.0, left)


def cooldown_until(policy: Policy, job: Job) -> datetime | None:
    """R9: end of a pending job's backoff hold (None when there is none)."""
    return policy.hold_until(job.last_preempted_at, job.preemptions)


def in_cooldown(policy: Policy, now: datetime, job: Job) -> bool:
    until = cooldown_until(policy, job)
    return until is not None and now < until


def cascade_guarded(policy: Policy, now: datetime, job: Job) -> bool:
    """R10: preempted within the last ``cascade_guard_s`` seconds."""
    g = policy.cascade_guard_s
    return g > 0 and job.last_preempted_at is not None and age_s(now, job.last_preempted_at) < g


def keeps_group(job: Job) -> bool:
    """Must a gang's nodes all share a block or an NVLink domain (R2)? Only a
    multi-node job that asks for one."""
    return job.nodes > 1 and (job.same_block or job.same_nvlink_domain)


def gang_group(node: Node, job: Job) -> tuple:
    """What all of a gang's nodes must share (R2): the node's block when the job asks
    for one block, its NVLink domain when it asks for one domain (None otherwise)."""
    return (node.block if job.same_block else None,
            node.nvlink_domain if job.same_nvlink_domain else None)


# ------------------------------------------------------------ objective item 3
def _decimal(priority: float) -> Decimal:
    """A priority as the decimal number it was written as (0.1 is 1/10, not the
    binary float nearest to it)."""
    return Decimal(priority) if isinstance(priority, int) else Decimal(repr(priority))


def priority_scale(priorities: Iterable[int | float]) -> int:
    """The smallest power of 10 that makes every priority an integer (1 for integer
    priorities): the planner multiplies priorities by it, so that CP-SAT, which
    weighs integers, sees the same order and the same sums exactly."""
    places = 0
    for p in priorities:
        if not isinstance(p, int):
            exponent = _decimal(p).normalize().as_tuple().exponent
            places = max(places, -exponent if isinstance(exponent, int) else 0)
    return 10**places


def scaled_priority(priority: float, scale: int) -> int:
    """``priority * scale`` as an exact integer (``scale`` from :func:`priority_scale`)."""
    return priority * scale if isinstance(priority, int) else int(_decimal(priority) * scale)


def priority_value(jobs: Iterable[Job]) -> int | float:
    """Objective item 3: the sum of ``priority x GPUs`` over ``jobs``, summed exactly
    (an integer for integer priorities; fractions as decimals, then a float), so that
    the planner and the verifier agree to the last digit."""
    jobs = list(jobs)
    if all(isinstance(j.priority, int) for j in jobs):
        return sum(j.priority * j.total_gpus for j in jobs)
    total = sum((_decimal(j.priority) * j.total_gpus for j in jobs), Decimal(0))
    return int(total) if total == total.to_integral_value() else float(total)
