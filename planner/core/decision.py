"""What a planner chose, and what follows from it alone.

Every planner (CP-SAT, LNS, the greedy planner and its passes, the baselines)
produces a :class:`Decision`: victims and, per placed job, its GPUs. This module
holds what they all derive from one: who uses which victim's GPUs
(:func:`preemptors_of`), the exempt victims (R15, :func:`exempt_victims`), the
objective (:func:`objective_of`) and :func:`clean`, which drops victims no placed
job uses (R7) and enforces the rolling eviction budget (R15) as a last net.
planner/checks/assemble.py turns a decision into the contract's plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models import Objective
from models.rules import priority_value
from planner.core.problem import Problem


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
                owner = gpu_victim.get((ni, g))
                if owner is not None:
                    out[owner].add(j)
    return {v: sorted(js) for v, js in out.items()}


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
