"""Turn a planner's decisions (victims, placements) into a contract plan.

All planners (CP-SAT, greedy, baselines) produce a :class:`Decision`; this module
derives everything else exactly as section 6 of the contract defines it: each
victim's grace from the storm load on its storage (R11/R12), preemptors,
start_after_s, requeue holds, storm totals, the objective, and a reason for
every deferred job. Victims that no placed job uses are dropped (R7: no
eviction without a beneficiary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta

from models import (
    Eviction,
    Objective,
    Placement,
    PlacementPart,
    Plan,
    SolverInfo,
    StormLoad,
)
from models.rules import flush_s, flushes, local_flush_s, need_s, priority_value
from planner.problem import Problem


@dataclass
class Decision:
    """What a planner chose: victims and, per placed job, (node idx, GPU mask) parts."""

    victims: set[str] = field(default_factory=set)
    placements: dict[str, list[tuple[int, int]]] = field(default_factory=dict)


def bits(mask: int) -> list[int]:
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return out


def preemptors_of(problem: Problem, d: Decision) -> dict[str, list[str]]:
    """victim -> placed jobs using at least one of its GPUs."""
    gpu_victim: dict[tuple[int, int], str] = {}
    for v in d.victims:
        for ni, m in problem.running[v].parts:
            for g in bits(m):
                gpu_victim[(ni, g)] = v
    out: dict[str, set[str]] = {v: set() for v in d.victims}
    for j, parts in d.placements.items():
        for ni, m in parts:
            for g in bits(m):
                v = gpu_victim.get((ni, g))
                if v is not None:
                    out[v].add(j)
    return {v: sorted(js) for v, js in out.items()}


def storm_loads(problem: Problem, victims: set[str]) -> dict[str, float]:
    """F_s per storage target: total size_gb of flushing victims (R11)."""
    loads: dict[str, float] = {}
    for v in victims:
        info = problem.running[v]
        if info.storage is not None and flushes(info.job):
            loads[info.storage] = loads.get(info.storage, 0.0) + info.job.checkpoint.size_gb
    return loads


def grace_of(problem: Problem, v: str, loads: dict[str, float]) -> tuple[float, float, float]:
    """(flush_s, need_s, grace_s) of a victim under the storm loads."""
    info = problem.running[v]
    job = info.job
    storage = problem.snap.storage_map().get(info.storage) if info.storage else None
    local = local_flush_s(problem.snap.node_map(), job)
    fl = flush_s(job, storage, loads.get(info.storage or "", 0.0), local)
    need = need_s(problem.policy, job, fl)
    if not flushes(job):
        return 0.0, need, float(problem.policy.grace.min_s)
    grace = min(float(math.ceil(need - 1e-9)), float(problem.policy.grace.max_s))
    return fl, need, max(grace, need)


def decision_ok(problem: Problem, d: Decision) -> bool:
    """Cheap check of the storm rule (R11/R12) for a decision's victims."""
    loads = storm_loads(problem, d.victims)
    mx = problem.policy.grace.max_s
    return all(grace_of(problem, v, loads)[1] <= mx + 1e-9 for v in d.victims)


def objective_of(problem: Problem, d: Decision) -> Objective:
    tiers = sorted(problem.policy.tiers)
    admitted = {str(t): 0 for t in tiers}
    for j in d.placements:
        job = problem.pending[j].job
        admitted[str(job.tier)] += job.total_gpus
    prio = priority_value(problem.pending[j].job for j in d.placements)
    cost = sum(problem.running[v].cost for v in d.victims)
    return Objective(admitted_gpus=admitted, priority_value=prio,
                     eviction_cost_gpu_s=round(cost, 6), evictions=len(d.victims))


def exempt_victims(problem: Problem, pre: dict[str, list[str]] | dict[str, set[str]]
                   ) -> set[str]:
    """R15: the exempt victims (``pre``: victim -> its preemptors, as
    :func:`preemptors_of` gives them): those with a preemptor of an exempt tier, or
    with ``thrash.exempt_if: all`` those whose preemptors all are."""
    tb = problem.thrash
    if tb is None or not tb.exempt_tiers:
        return set()
    pending = problem.pending
    return {v for v, js in pre.items() if tb.exempt_by(pending[j].job.tier for j in js)}


def clean(problem: Problem, d: Decision) -> Decision:
    """Drop victims that no placed job uses (R7's second half); then, if the plan
    breaks the rolling eviction budget (R15), the least valuable placements that
    use victims which are not exempt, until it holds (every heuristic keeps R15
    while it searches; this is the net under them)."""
    pre = preemptors_of(problem, d)
    out = Decision({v for v in d.victims if pre[v]}, dict(d.placements))
    tb = problem.thrash
    if tb is not None and (len(out.victims) > tb.left
                           or _victim_gpus(problem, out.victims) > tb.gpus_left):
        _within_thrash_budget(problem, out, {v: set(pre[v]) for v in out.victims})
    return out


def _victim_gpus(problem: Problem, victims: set[str]) -> int:
    return sum(problem.running[v].job.total_gpus for v in victims)


def _within_thrash_budget(problem: Problem, d: Decision, pre: dict[str, set[str]]) -> None:
    """Make ``d`` (cleaned; ``pre`` its victims' preemptors) satisfy R15 in place:
    drop placements of tiers that are not exempt, least valuable first (the
    objective's order reversed: lowest tier, fewest GPUs, lowest priority), each
    only while it uses a victim that is not exempt, until R15 holds. Exempt victims
    stay exempt throughout (their exempt preemptors are never dropped; with
    ``exempt_if: all`` a victim becomes exempt when its last other preemptor goes),
    so one pass in that order is enough; at worst every victim left is exempt."""
    tb = problem.thrash
    assert tb is not None
    pending = problem.pending
    exempt = exempt_victims(problem, pre)
    uses: dict[str, set[str]] = {}
    for v, js in pre.items():
        for j in js:
            uses.setdefault(j, set()).add(v)
    order = sorted((j for j in uses if pending[j].job.tier not in tb.exempt_tiers),
                   key=lambda j: (-pending[j].job.tier, pending[j].job.total_gpus,
                                  pending[j].job.priority, j))
    for j in order:
        if tb.allows(len(d.victims), len(exempt), _victim_gpus(problem, d.victims)):
            return
        if not any(v not in exempt for v in uses[j]):
            continue
        del d.placements[j]
        for v in uses[j]:
            pre[v].discard(j)
            if not pre[v]:
                d.victims.discard(v)
            elif v not in exempt and tb.exempt_by(pending[u].job.tier for u in pre[v]):
                exempt.add(v)


def assemble(problem: Problem, d: Decision, status: str, solver: SolverInfo) -> Plan:
    from planner.explain import deferred_entry

    d = clean(problem, d)
    pre = preemptors_of(problem, d)
    loads = storm_loads(problem, d.victims)
    now = problem.now
    policy = problem.policy
    evictions = []
    grace: dict[str, float] = {}
    for v in sorted(d.victims):
        info = problem.running[v]
        fl, _need, g = grace_of(problem, v, loads)
        grace[v] = g
        hold = g + policy.backoff.cooldown(info.job.preemptions + 1)
        evictions.append(Eviction(
            job=v, tier=info.job.tier, preemptors=pre[v], signal=info.job.checkpoint.signal,
            grace_s=g, flush_s=round(fl, 9), cost_gpu_s=round(info.cost, 6),
            requeue_hold_until=now + timedelta(seconds=hold)))
    victim_of: dict[str, set[str]] = {}
    for v, js in pre.items():
        for j in js:
            victim_of.setdefault(j, set()).add(v)
    placements = []
    for j in sorted(d.placements):
        parts = sorted(d.placements[j], key=lambda p: problem.nodes[p[0]].node.id)
        placements.append(Placement(
            job=j,
            placement=[PlacementPart(node=problem.nodes[ni].node.id, gpus=bits(m))
                       for ni, m in parts],
            start_after_s=max((grace[v] for v in victim_of.get(j, ())), default=0)))
    storage = problem.snap.storage_map()
    storm = [StormLoad(storage=s, flush_gb=round(f, 9),
                       flush_s=round(f / storage[s].write_gb_per_s, 9))
             for s, f in sorted(loads.items()) if f > 0]
    problem.__dict__.pop("_explain_cache", None)  # its answers depend on this decision
    deferred = [deferred_entry(problem, problem.pending[j], d, loads)
                for j in sorted(problem.pending) if j not in d.placements]
    return Plan(now=now, status=status, objective=objective_of(problem, d), evictions=evictions,
                placements=placements, deferred=deferred, storm=storm,
                warnings=list(problem.warnings), solver=solver)
