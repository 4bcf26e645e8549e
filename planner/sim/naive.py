"""The ``naive`` baseline: plain priority preemption as many clusters run it.

A pending job that does not fit in free GPUs evicts running jobs of the tiers its
own tier may preempt (R5, R7 rights only) right away, with a fixed 30 s grace for
every victim. No immunity (R6), no windows (R8), no backoff (R9), no cascade
guard (R10), no storm limit (R11/R12), no budgets (R13). Capacity, gang,
topology, pools and GPU types are respected, so its plans can be executed.

Its plans therefore break the contract's preemption rules on purpose: it is the
"before" picture of the simulator, not a planner to deploy.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import timedelta

from models import (
    Deferred,
    Eviction,
    Job,
    Node,
    Objective,
    Placement,
    PlacementPart,
    Plan,
    Snapshot,
)
from models.plan import SolverInfo, StormLoad
from models.rules import eviction_cost, gang_group, local_flush_s, priority_value, victim_storage
from planner.core.topology import best_fit, fits, list_to_mask, mask_to_list

NAIVE_GRACE_S = 30.0

__all__ = ["NAIVE_GRACE_S", "plan_naive"]


def _node_ok(snap: Snapshot, node: Node, job: Job) -> bool:
    if node.state != "up":
        return False
    if job.gpu_type is not None and node.gpu_type != job.gpu_type:
        return False
    if not snap.policy.pool_admits(node.pool, job.tier):
        return False
    if job.same_block and node.block is None:
        return False
    return not (job.same_nvlink_domain and node.nvlink_domain is None)


def _fits(node: Node, mask: int, job: Job) -> bool:
    return fits(node.nvlink_raw(), node.gpus, mask, job.gpus_per_node, job.topology == "nvlink")


def plan_naive(snap: Snapshot, grace_s: float = NAIVE_GRACE_S) -> Plan:
    """Plan one tick with plain priority preemption (see the module docstring)."""
    t0 = time.perf_counter()
    policy = snap.policy
    nodes = snap.node_map()
    free: dict[str, int] = {n.id: (1 << n.gpus) - 1 for n in snap.nodes}
    owner: dict[str, dict[int, str]] = defaultdict(dict)
    running: dict[str, Job] = {}
    warnings: list[str] = []
    for j in snap.running():
        parts = j.placement or []
        if any(nodes[p.node].state == "down" for p in parts):
            warnings.append(f"job {j.id} runs on a down node; ignored")
            for p in parts:
                free[p.node] &= ~list_to_mask(p.gpus)
            continue
        running[j.id] = j
        for p in parts:
            free[p.node] &= ~list_to_mask(p.gpus)
            for g in p.gpus:
                owner[p.node][g] = j.id
    victims: dict[str, set[str]] = {}        # victim -> preemptors
    freed_by: dict[tuple[str, int], str] = {}  # GPU freed by a victim this tick
    placements: list[Placement] = []
    deferred: list[Deferred] = []
    admitted: dict[str, int] = {str(t): 0 for t in sorted(policy.tiers)}
    def evictable(j: Job, attacker_tier: int) -> bool:
        return (j.id not in victims and policy.tiers[j.tier].preemptible
                and policy.can_preempt(attacker_tier, j.tier))

    def order(j: Job) -> tuple:
        sub = j.submitted_at.timestamp() if j.submitted_at else 0.0
        return (j.tier, -j.priority, sub, j.id)

    no_room: set[tuple] = set()  # shapes that fit no free GPUs (until an eviction frees some)
    for job in sorted(snap.pending(), key=order):
        shape = (job.gpus_per_node, job.nodes, job.topology, job.gpu_type, job.tier,
                 job.same_block, job.same_nvlink_domain)
        if shape in no_room and not policy.tiers[job.tier].can_preempt:
            deferred.append(Deferred(job=job.id, reason="OUTRANKED",
                                     detail="no capacity, even by evicting lower tiers"))
            continue
        cands = [n for n in snap.nodes if _node_ok(snap, n, job)]
        if not any(_fits(n, (1 << n.gpus) - 1, job) for n in cands):
            deferred.append(Deferred(job=job.id, reason="NO_FIT",
                                     detail="no node could host it even if empty"))
            continue
        # per node: the cheapest victim set that makes it fit (lowest tier and priority first,
        # most recently started first)
        options: dict[tuple, list[tuple[int, str, list[str], int]]] = defaultdict(list)
        for n in cands:
            mask = free[n.id]
            chosen: list[str] = []
            if not _fits(n, mask, job):
                if not policy.tiers[job.tier].can_preempt:
                    continue
                local = {owner[n.id][g] for g in mask_to_list(((1 << n.gpus) - 1) & ~mask)
                         if g in owner[n.id]}
                pool = sorted((running[v] for v in local
                               if v in running and evictable(running[v], job.tier)),
                              key=lambda v: (-v.tier, v.priority,
                                             -(v.started_at.timestamp() if v.started_at else 0),
                                             v.id))
                for v in pool:
                    chosen.append(v.id)
                    for p in v.placement or []:
                        if p.node == n.id:
                            mask |= list_to_mask(p.gpus)
                    if _fits(n, mask, job):
                        break
                else:
                    continue
            cost = sum(running[v].total_gpus for v in chosen)
            options[gang_group(n, job)].append((cost, n.id, chosen, mask))
        best: list[tuple[int, str, list[str], int]] | None = None
        for group in options.values():
            if len(group) < job.nodes:
                continue
            group.sort(key=lambda o: (o[0], o[3].bit_count(), o[1]))
            pick = group[: job.nodes]
            if best is None or sum(o[0] for o in pick) < sum(o[0] for o in best):
                best = pick
        if best is None:
            no_room.add(shape)
            deferred.append(Deferred(job=job.id, reason="OUTRANKED",
                                     detail="no capacity, even by evicting lower tiers"))
            continue
        parts = []
        new_victims = {vid for o in best for vid in o[2]}
        if new_victims:
            no_room.clear()
        for vid in sorted(new_victims):
            victims[vid] = set()
            for p in running[vid].placement or []:
                gm = list_to_mask(p.gpus)
                free[p.node] |= gm
                for g in p.gpus:
                    freed_by[(p.node, g)] = vid
                    owner[p.node].pop(g, None)
        uses_victim = False
        for _, nid, _, _ in sorted(best, key=lambda o: o[1]):
            n = nodes[nid]
            m = best_fit(n.nvlink_raw(), n.gpus, free[nid], job.gpus_per_node,
                         job.topology == "nvlink")
            assert m is not None
            free[nid] &= ~m
            gl = mask_to_list(m)
            for g in gl:
                owner[nid][g] = job.id
                by = freed_by.get((nid, g))
                if by is not None:
                    victims[by].add(job.id)
                    uses_victim = True
            parts.append(PlacementPart(node=nid, gpus=gl))
        placements.append(Placement(job=job.id, placement=parts,
                                    start_after_s=grace_s if uses_victim else 0))
        admitted[str(job.tier)] = admitted.get(str(job.tier), 0) + job.total_gpus
    # a victim none of whose GPUs went to a placed job is not evicted after all
    victims = {v: p for v, p in victims.items() if p}
    evictions, storm_gb = _evictions(snap, running, victims, grace_s)
    storm = [StormLoad(storage=s, flush_gb=gb, flush_s=gb / snap.storage_map()[s].write_gb_per_s)
             for s, gb in sorted(storm_gb.items()) if gb > 0]
    jobs = snap.job_map()
    prio_value = priority_value(jobs[pl.job] for pl in placements)
    objective = Objective(admitted_gpus=admitted, priority_value=prio_value,
                          eviction_cost_gpu_s=round(sum(e.cost_gpu_s for e in evictions), 6),
                          evictions=len(evictions))
    return Plan(now=snap.now, status="feasible", objective=objective, evictions=evictions,
                placements=placements, deferred=deferred, storm=storm, warnings=warnings,
                solver=SolverInfo(engine="naive", status="HEURISTIC",
                                  wall_s=round(time.perf_counter() - t0, 6)))


def _evictions(snap: Snapshot, running: dict[str, Job], victims: dict[str, set[str]],
               grace_s: float) -> tuple[list[Eviction], dict[str, float]]:
    nodes = snap.node_map()
    load: dict[str, float] = defaultdict(float)
    for v in victims:
        j = running[v]
        st = victim_storage(snap, j)
        if j.checkpoint.signal is not None and st is not None:
            load[st.id] += j.checkpoint.size_gb
    out = []
    for v in sorted(victims):
        j = running[v]
        st = victim_storage(snap, j)
        fl = 0.0
        if j.checkpoint.signal is not None:
            shared = load[st.id] / st.write_gb_per_s if st is not None else 0.0
            fl = max(shared, local_flush_s(nodes, j))
        out.append(Eviction(job=v, tier=j.tier, preemptors=sorted(victims[v]),
                            signal=j.checkpoint.signal, grace_s=grace_s, flush_s=round(fl, 6),
                            cost_gpu_s=round(eviction_cost(snap, j, nodes), 6),
                            requeue_hold_until=snap.now + timedelta(seconds=grace_s)))
    return out, dict(load)
