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
from collections.abc import Collection
from datetime import timedelta

from models import (
    Eviction,
    Placement,
    PlacementPart,
    Plan,
    SolverInfo,
    StormLoad,
)
from models.rules import flush_s, flushes, local_flush_s, need_s
from planner.checks import explain
from planner.core.decision import Decision, bits, clean, objective_of, preemptors_of
from planner.core.problem import Problem


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


def assemble(problem: Problem, d: Decision, status: str, solver: SolverInfo, *,
             unreached: Collection[str] = (), free_only: Collection[str] = ()) -> Plan:
    """The contract's plan of decision ``d``. ``unreached``: pending jobs the planner
    did not consider before its time limit ended; ``free_only``: those it considered
    only for free GPUs (both deferred as OUTRANKED, saying so)."""
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
    explain.forget(problem)  # its answers depend on this decision
    late = {**dict.fromkeys(free_only, "free"), **dict.fromkeys(unreached, "none")}
    deferred = explain.deferred_entries(problem, d, loads, late)
    return Plan(now=now, status=status, objective=objective_of(problem, d), evictions=evictions,
                placements=placements, deferred=deferred, storm=storm,
                warnings=list(problem.warnings), solver=solver)
