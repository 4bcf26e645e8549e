"""Large-neighbourhood search: improve a plan one part of the cluster at a time.

When the whole CP-SAT model cannot be built and solved long enough in the time
limit (for example 256 nodes at 0.3-1.5 s, 1,024 at 1 s, 4,096 at 5 s on the 2-core
benchmark machine), the planner improves its greedy plan by
re-solving one *neighbourhood* at a time: two consecutive groups of nodes (a
group is one storage target, or part of one cut along network blocks; at most
``NEIGHBOURHOOD_NODES`` nodes in all). Inside a neighbourhood every decision is
open again, everything else stays as it is:

* jobs the plan places with a shard outside the neighbourhood stay where they
  are, and so do the victims they use, and victims with a node outside (with the
  jobs that use their GPUs, to closure: R7 needs every victim's beneficiary);
* the other placed jobs, and every job the plan defers, may go to any of their
  candidate nodes inside the neighbourhood, evicting what they may (R5-R10);
* the storage targets' flush loads (R11/R12) and the eviction budgets (R13, R15)
  count the victims that stay: each victim inside gets the storm cap that is left.

The sub-problem is an ordinary :class:`~planner.core.problem.Problem`, solved by the
same CP-SAT model and phases as the whole cluster, hinted with the current
plan's part of it. A round's result replaces the plan only when it is
lexicographically better (objective items 1-5), so the plan never gets worse.
Rounds visit the neighbourhoods in turn until the time is up or a whole pass
brings nothing.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

from planner.core.budget import Budget
from planner.core.decision import Decision, clean, exempt_victims, objective_of, preemptors_of
from planner.core.problem import Problem
from planner.solver.model import BuildTimeout, CpsatModel, min_solve_s, run_phases
from planner.solver.speed import scaled

NEIGHBOURHOOD_NODES = 128  # nodes re-solved per round
# on the benchmark machine (round_s(), round_margin_s(): on this one, planner/solver/speed.py)
ROUND_S = 0.3  # CP-SAT time per round (less when less is left)
ROUND_MARGIN_S = 0.03  # kept after a round's solve for reading and merging its result


def round_s(deterministic: bool = False) -> float:
    """A round's CP-SAT time on this machine (ROUND_S scaled by the speed factor)."""
    return scaled(ROUND_S, deterministic)


def round_margin_s() -> float:
    """The time kept after a round's solve on this machine (ROUND_MARGIN_S scaled)."""
    return scaled(ROUND_MARGIN_S)


@dataclass
class LnsResult:
    decision: Decision
    rounds: int
    improved: int
    # the mean wall time of the whole rounds (those whose solve had round_s()), from
    # the cut to the merge; None when no round was whole
    whole_round_s: float | None = None


def neighbourhoods(problem: Problem, size: int | None = None) -> list[frozenset[int]]:
    """Node sets of at most ``size`` nodes (default ``NEIGHBOURHOOD_NODES``): the
    usable nodes are cut into groups of at most half that, by storage target and
    then network block (blocks kept whole where they fit), and each neighbourhood
    joins two consecutive groups, so that consecutive rounds overlap and a job can
    move from one group to the next (also across storage targets)."""
    half = max(1, (size or NEIGHBOURHOOD_NODES) // 2)
    by_block: dict[tuple, list[int]] = {}
    for n in problem.nodes:
        if n.usable:
            s = n.storage.id if n.storage is not None else ""
            by_block.setdefault((s, n.node.block or ""), []).append(n.idx)
    groups: list[list[int]] = []
    cur: list[int] = []
    cur_storage = None
    for (s, _b), idx in sorted(by_block.items()):
        if cur and s != cur_storage:
            groups.append(cur)
            cur = []
        cur_storage = s
        for i in range(0, len(idx), half):  # a block bigger than a group is cut
            chunk = idx[i:i + half]
            if cur and len(cur) + len(chunk) > half:
                groups.append(cur)
                cur = []
            cur += chunk
    if cur:
        groups.append(cur)
    if len(groups) <= 2:
        return [frozenset(g) for g in groups]
    return [frozenset(groups[k] + groups[(k + 1) % len(groups)]) for k in range(len(groups))]


def sub_problem(problem: Problem, d: Decision,
                area: frozenset[int]) -> tuple[Problem, Decision, Decision] | None:
    """The problem restricted to ``area`` around plan ``d``: (sub-problem, the part of
    ``d`` that stays, the part that the sub-problem decides again). None when the
    eviction budgets are already used up by what stays."""
    pre = preemptors_of(problem, d)  # victim -> jobs using its GPUs
    uses: dict[str, set[str]] = {}
    for v, js in pre.items():
        for j in js:
            uses.setdefault(j, set()).add(v)
    keep_jobs = {j for j, parts in d.placements.items() if any(ni not in area for ni, _ in parts)}
    keep_victims = {v for v in d.victims
                    if any(ni not in area for ni, _ in problem.running[v].parts)}
    todo = list(keep_jobs) + list(keep_victims)
    linked: Iterable[str]
    while todo:  # closure: what stays keeps its victims and the victims' beneficiaries
        x = todo.pop()
        if x in keep_jobs:
            linked, group = uses.get(x, ()), keep_victims
        else:
            linked, group = pre.get(x, ()), keep_jobs
        for y in linked:
            if y not in group:
                group.add(y)
                todo.append(y)
    taken: dict[int, int] = {}
    for j in keep_jobs:
        for ni, m in d.placements[j]:
            taken[ni] = taken.get(ni, 0) | m
    nodes = [dataclasses.replace(n, free=n.free & ~taken[n.idx]) if n.idx in taken else n
             for n in problem.nodes]
    # R11/R12: the load the staying victims put on each storage target, and the
    # tightest cap among them; a victim inside may only add what is left
    load: dict[str, float] = {}
    cap: dict[str, float] = {}
    for v in keep_victims:
        vi = problem.running[v]
        if vi.flushing and vi.storage is not None:
            load[vi.storage] = load.get(vi.storage, 0.0) + vi.flush_gb
            cap[vi.storage] = min(cap.get(vi.storage, math.inf), vi.storm_cap_gb)
    running = {}
    for vid, vi in problem.running.items():
        if vid in keep_victims:
            continue  # evicted and staying: its GPUs are the staying jobs' or unused
        if vi.evictable and any(ni not in area for ni, _ in vi.parts):
            vi = dataclasses.replace(vi, evictable=False, why_not="outside the neighbourhood",
                                     rule="LNS")
        elif vi.evictable and vi.flushing and vi.storage in load:
            vi = dataclasses.replace(vi, storm_cap_gb=min(vi.storm_cap_gb, cap[vi.storage])
                                     - load[vi.storage])
        running[vid] = vi
    pol = problem.policy
    update: dict[str, float] = {}
    if pol.max_evictions_per_tick is not None:
        left = pol.max_evictions_per_tick - len(keep_victims)
        if left < 0:
            return None
        update["max_evictions_per_tick"] = left
    if pol.max_evicted_gpu_fraction is not None:
        total = problem.total_gpus_up_drain
        limit = math.floor(pol.max_evicted_gpu_fraction * total + 1e-9)
        left = limit - sum(problem.running[v].job.total_gpus for v in keep_victims)
        if left < 0 or total <= 0:
            return None
        update["max_evicted_gpu_fraction"] = min(1.0, left / total)
    thrash = problem.thrash
    if thrash is not None and keep_victims:
        # R15: the victims that stay count as evicted in the window; when one of them
        # is not exempt, the plan may have at most B - H victims in all, so every
        # victim inside counts the same (no tier exempt)
        kept_exempt = exempt_victims(problem, {v: pre[v] for v in keep_victims})
        thrash = dataclasses.replace(
            thrash, recent=thrash.recent + len(keep_victims),
            recent_gpus=thrash.recent_gpus + sum(problem.running[v].job.total_gpus
                                                 for v in keep_victims),
            exempt_tiers=(thrash.exempt_tiers if len(kept_exempt) == len(keep_victims)
                          else frozenset()))
    inside: dict[int, list[int]] = {}  # jobs of one shape share their candidate list
    pending = {}
    for j, info in problem.pending.items():
        if j not in keep_jobs:
            cands = inside.get(id(info.candidates))
            if cands is None:
                cands = inside[id(info.candidates)] = [n for n in info.candidates if n in area]
            pending[j] = dataclasses.replace(info, candidates=cands)
    sub = dataclasses.replace(problem, nodes=nodes, running=running, pending=pending,
                              policy=pol.model_copy(update=update) if update else pol,
                              thrash=thrash)
    stay = Decision(set(keep_victims), {j: d.placements[j] for j in keep_jobs})
    again = Decision({v for v in d.victims if v not in keep_victims},
                     {j: p for j, p in d.placements.items() if j not in keep_jobs})
    return sub, stay, again


def improve(problem: Problem, d: Decision, budget: Budget, *, workers: int = 2,
            seed: int = 0, size: int | None = None, speed: float = 1.0) -> LnsResult:
    """Re-solve neighbourhoods (of at most ``size`` nodes) in turn until ``budget``
    ends (it needs a wall clock) or a pass without improvement; returns the best
    plan found, never worse than ``d``, and the time its whole rounds took. Each
    round's build may take half the time left, its solve round_s() of what is left
    before round_margin_s() from the end. ``speed``: as for :func:`run_phases`."""
    assert budget.wall  # (LNS runs only with a wall clock)
    areas = neighbourhoods(problem, size)
    best, key = d, objective_of(problem, d).key()
    rounds = improved = 0
    since = 0  # rounds since the last improvement
    k = 0
    whole: list[float] = []  # the wall times of whole rounds
    full = round_s()
    while since < len(areas) and len(areas) > 1:
        t = time.perf_counter()
        left = budget.end - t
        if left < 2 * min_solve_s():
            break
        area = areas[k % len(areas)]
        k += 1
        since += 1
        cut = sub_problem(problem, best, area)
        if cut is None:
            continue
        sub, stay, again = cut
        try:
            model = CpsatModel(sub, budget=budget.until(time.perf_counter() + left / 2))
        except BuildTimeout:
            break
        if not model.classes:
            continue
        # the solve ends a little after its limit, then the solution is read back
        now = time.perf_counter()
        solve = budget.less(round_margin_s()).until(now + full)
        if solve.end - now < min_solve_s():
            break
        res = run_phases(model, again, solve, deterministic=False, workers=workers,
                         seed=seed + rounds, speed=speed)
        rounds += 1
        if res.best is not None:
            cand = clean(problem, Decision(stay.victims | res.best.victims,
                                           {**stay.placements, **res.best.placements}))
            ck = objective_of(problem, cand).key()
            if ck > key:
                best, key = cand, ck
                improved += 1
                since = 0
        if solve.end == now + full:  # (a whole round)
            whole.append(time.perf_counter() - t)
    return LnsResult(best, rounds, improved, sum(whole) / len(whole) if whole else None)
