"""Polishing a plan: repacking, relocation, cheaper victims (docs/planner.md 2a).

Three cheap passes that make a plan lexicographically better without changing
how many GPUs each tier gets; :func:`polish` runs them in this order.

**Repacking.** The greedy planner takes the jobs of a tier largest first, so
that big gangs find room. The price is paid in objective item 3 (priority): an
8-node gang of priority 11 may hold 64 GPUs that eight single-node jobs of
priority 13 to 79 could use, and then those jobs wait. :func:`repack` looks at
each placed job ``K``, least important first, and tries to fill exactly the
GPUs ``K`` holds with deferred jobs of the same tier and higher priority (best
fit, most important first). The swap is made only when every GPU of ``K`` is
used again and the priority value grows. Then:

* every tier's admitted GPUs stay the same (item 1-2), the priority value grows
  (item 3), and the victims, hence the eviction cost, the storm loads (R11/R12)
  and the budgets (R13), do not change (items 4-5);
* each victim whose GPUs ``K`` used now serves the new jobs, which may take them:
  a GPU held by a victim is only given to a job whose tier may preempt the
  victim's (R7), so a job under the cascade guard (R10) gets free GPUs only;
* each new job runs on its own candidate nodes (R1, R4, pools), with connected
  GPUs when it needs NVLink (R3), and gangs on distinct nodes of one block or
  NVLink domain when they ask for it (R2); jobs under cooldown (R9) stay
  deferred.

**Relocation.** :func:`relocate` moves a single-node job to GPUs the plan leaves
idle when the victims it used serve nobody else, so that they keep running
(see its docstring).

**Cheaper victims.** :func:`cheaper_victims` runs the greedy planner's
:meth:`~planner.heuristics.greedy.GreedyPlanner.cheaper_placements`: single-node jobs, and
gangs free to use any nodes, move to cheaper victims next to the rest of the
plan, within the storm limit and the budgets.

Both passes only look at what changes, and ``plan()`` still verifies the result.
"""

from __future__ import annotations

from collections import defaultdict

from models.rules import gang_group, keeps_group
from planner.core import topology as topo
from planner.core.budget import Budget
from planner.core.decision import Decision
from planner.core.problem import PendingInfo, Problem
from planner.core.topology import mask_to_list as _bits
from planner.heuristics.greedy import GreedyPlanner


def repack(problem: Problem, d: Decision, budget: Budget | None = None) -> tuple[Decision, int]:
    """A copy of ``d`` in which placed jobs have given their GPUs to more important
    deferred jobs of their tier where that raises the priority value, and the
    number of such swaps. Stops early at the end of ``budget``."""
    placements = dict(d.placements)
    deferred: dict[int, list[PendingInfo]] = defaultdict(list)
    for j, info in sorted(problem.pending.items()):
        if j not in placements and info.held_until is None and info.candidates:
            deferred[info.job.tier].append(info)
    for infos in deferred.values():
        infos.sort(key=lambda i: (-i.job.priority, -i.job.total_gpus, i.job.id))
    swaps = 0
    order = sorted(placements, key=lambda j: (problem.pending[j].job.priority,
                                              -problem.pending[j].job.total_gpus, j))
    for k in order:
        if budget is not None and budget.expired():
            break
        kinfo = problem.pending[k]
        kjob = kinfo.job
        queue = []
        for i in deferred.get(kjob.tier, ()):  # most important first
            if i.job.priority <= kjob.priority:
                break
            if i.job.total_gpus <= kjob.total_gpus:
                queue.append(i)
        if sum(i.job.total_gpus for i in queue) < kjob.total_gpus:
            continue  # they could not use every GPU of k
        fill = _fill(problem, d.victims, dict(placements[k]), queue)
        if fill is None:
            continue
        gain = sum(i.job.priority * i.job.total_gpus for i, _p in fill) \
            - kjob.priority * kjob.total_gpus
        if gain <= 0:
            continue
        del placements[k]
        for i, parts in fill:
            placements[i.job.id] = parts
        taken = {id(i) for i, _p in fill}
        deferred[kjob.tier] = [i for i in deferred[kjob.tier] if id(i) not in taken]
        deferred[kjob.tier].append(kinfo)
        deferred[kjob.tier].sort(key=lambda i: (-i.job.priority, -i.job.total_gpus, i.job.id))
        swaps += 1
    return Decision(set(d.victims), placements), swaps


def _fill(problem: Problem, victims: set[str], rem: dict[int, int], queue: list[PendingInfo]
          ) -> list[tuple[PendingInfo, list[tuple[int, int]]]] | None:
    """Place jobs of ``queue`` (in order) on exactly the GPUs ``rem`` (node -> mask);
    the placements when every GPU is used, else None."""
    need = sum(m.bit_count() for m in rem.values())
    out: list[tuple[PendingInfo, list[tuple[int, int]]]] = []
    for info in queue:
        job = info.job
        if job.total_gpus > need:
            continue
        nodes = problem.candidate_set(info)
        fits = []  # (leftover, node, mask)
        for ni in sorted(rem):
            if ni not in nodes:
                continue
            usable = _usable(problem, victims, info, ni, rem[ni])
            mask = topo.layout_best_fit(problem.nodes[ni].layout, usable, job.gpus_per_node,
                                        info.need_nvlink)
            if mask is not None:
                fits.append((usable.bit_count() - job.gpus_per_node, ni, mask))
        chosen = _choose(problem, info, sorted(fits))
        if chosen is None:
            continue
        for _left, ni, mask in chosen:
            rem[ni] &= ~mask
        out.append((info, [(ni, mask) for _left, ni, mask in sorted(chosen, key=lambda f: f[1])]))
        need -= job.total_gpus
        if need == 0:
            return out
    return None


def _usable(problem: Problem, victims: set[str], info: PendingInfo, ni: int, mask: int) -> int:
    """The GPUs of ``mask`` on node ``ni`` the job may take: free ones, and those of
    victims whose tier its own tier may preempt (R7, R10)."""
    out = mask
    for owner, held in problem.owner.on(ni, mask):
        if not (owner in victims and problem.running[owner].job.tier in info.rights):
            out &= ~held
    return out


def _choose(problem: Problem, info: PendingInfo, fits: list[tuple[int, int, int]]
            ) -> list[tuple[int, int, int]] | None:
    """``job.nodes`` distinct nodes among ``fits`` (best fit first), inside one block
    or NVLink domain when the gang asks for it (R2); None if there are not enough."""
    job = info.job
    if len(fits) < job.nodes:
        return None
    if not keeps_group(job):
        return fits[:job.nodes]
    groups: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
    for f in fits:
        groups[gang_group(problem.nodes[f[1]].node, job)].append(f)
    for key in sorted(groups, key=repr):
        if len(groups[key]) >= job.nodes:
            return groups[key][:job.nodes]
    return None


def relocate(problem: Problem, d: Decision, budget: Budget | None = None
             ) -> tuple[Decision, int]:
    """A copy of ``d`` in which jobs whose victims serve nobody else have moved to
    GPUs the plan leaves idle (free, or of victims evicted anyway; a gang's shards
    to free GPUs only, on distinct nodes, in one block or NVLink domain when it
    keeps one), when that lets their victims keep running; and the number of such
    moves.

    The greedy variant that spares free GPUs for lower tiers leaves some unused in
    the end, and CP-SAT plans cut short may too. A move keeps every admitted job,
    only drops victims (so storm loads and budgets can only fall) and gives a job
    only GPUs it may take (R7/R10 rights, R3 NVLink, its candidate nodes): the
    plan is lexicographically better (lower cost and fewer evictions) and valid.
    Largest savings first; stops early at the end of ``budget``."""
    placements = dict(d.placements)
    victims = set(d.victims)
    users: dict[str, set[str]] = {v: set() for v in victims}  # victim -> jobs on its GPUs
    gpu_victim: dict[tuple[int, int], str] = {}
    for v in victims:
        for ni, m in problem.running[v].parts:
            for g in _bits(m):
                gpu_victim[(ni, g)] = v
    used: dict[int, int] = defaultdict(int)
    for j, parts in placements.items():
        for ni, m in parts:
            used[ni] |= m
            for g in _bits(m):
                owner = gpu_victim.get((ni, g))
                if owner is not None:
                    users[owner].add(j)

    def idle_any(ni: int) -> int:
        """GPUs of node ni no job uses: free, or of victims (any tier)."""
        node = problem.nodes[ni]
        m = node.free
        for g in _bits(node.full & ~node.free & ~used[ni]):
            if (ni, g) in gpu_victim:
                m |= 1 << g
        return m & ~used[ni]

    def refresh(nodes: set[int]) -> None:
        for ni in nodes:
            m = idle_any(ni)
            if m:
                idle[ni] = m
            else:
                idle.pop(ni, None)

    def exclusive(j: str) -> list[str]:
        return sorted({v for ni, m in placements[j] for g in _bits(m)
                       if (v := gpu_victim.get((ni, g))) is not None and users[v] == {j}})

    idle: dict[int, int] = {}
    refresh({n.idx for n in problem.nodes if n.usable})
    order = []
    for j in placements:
        save = sum(problem.running[v].cost for v in exclusive(j))
        if save > 0:
            order.append((-save, j))
    moves = 0
    for _s, j in sorted(order):
        if budget is not None and budget.expired():
            break
        info = problem.pending[j]
        drop = exclusive(j)
        if not drop:  # another move took its victims' GPUs meanwhile
            continue
        parts = placements[j]
        gang = info.job.nodes > 1
        # take the job and its own victims out, then look for idle GPUs
        touched = {ni for ni, _m in parts} | {
            ni for v in drop for ni, _m in problem.running[v].parts}
        for ni, m in parts:
            used[ni] &= ~m
        for v in drop:
            victims.discard(v)
            for ni, m in problem.running[v].parts:
                for g in _bits(m):
                    del gpu_victim[(ni, g)]
        refresh(touched)
        cands = problem.candidate_set(info)
        gpn = info.job.gpus_per_node
        fits: list[tuple[int, int, int]] = []  # (usable idle GPUs, node, mask)
        for ni in sorted(idle):  # best fit: fewest usable idle GPUs, then node index
            if idle[ni].bit_count() < gpn or ni not in cands:
                continue
            # R7, R10; a gang only free GPUs (its shards on other victims' GPUs could
            # change which victims R15 counts as exempt)
            avail = (idle[ni] & problem.nodes[ni].free if gang
                     else _usable(problem, victims, info, ni, idle[ni]))
            left = avail.bit_count()
            if left < gpn or (not gang and fits and left >= fits[0][0]):
                continue
            mask = topo.layout_best_fit(problem.nodes[ni].layout, avail, gpn, info.need_nvlink)
            if mask is not None:
                if gang:
                    fits.append((left, ni, mask))
                else:
                    fits = [(left, ni, mask)]
                    if left == gpn:
                        break  # an exact fit: nothing fits better
        chosen = _choose(problem, info, sorted(fits)) if fits else None
        if chosen is None:  # nowhere idle: put everything back
            for ni, m in parts:
                used[ni] |= m
            for v in drop:
                victims.add(v)
                for ni, m in problem.running[v].parts:
                    for g in _bits(m):
                        gpu_victim[(ni, g)] = v
            refresh(touched)
            continue
        for ni2, m2 in parts:
            for g in _bits(m2):
                owner = gpu_victim.get((ni2, g))
                if owner is not None:
                    users[owner].discard(j)
        for v in drop:
            users.pop(v, None)
        placements[j] = [(ni, mask) for _left, ni, mask in chosen]
        for _left, ni, mask in chosen:
            used[ni] |= mask
            for g in _bits(mask):
                owner = gpu_victim.get((ni, g))
                if owner is not None:
                    users[owner].add(j)
        refresh({ni for _left, ni, _mask in chosen})
        moves += 1
    return Decision(victims, placements), moves


def polish(problem: Problem, d: Decision, budget: Budget | None = None, *,
           cheaper: bool = True) -> tuple[Decision, str]:
    """:func:`repack`, :func:`relocate`, then (unless ``cheaper`` is false) the
    greedy planner's :meth:`~planner.heuristics.greedy.GreedyPlanner.cheaper_placements`: the
    better plan and what changed, in words ("" when nothing did)."""
    if budget is not None and budget.expired():
        return d, ""  # no time: not even the passes' set-up
    d, swaps = repack(problem, d, budget)
    d, moves = relocate(problem, d, budget)
    said = ([f"{swaps} repacking swap(s)"] if swaps else []) + \
        ([f"{moves} move(s) to idle GPUs"] if moves else [])
    if cheaper:
        d, more = cheaper_victims(problem, d, budget)
        said += [more] if more else []
    return d, ", ".join(said)


def cheaper_victims(problem: Problem, d: Decision, budget: Budget | None = None
                    ) -> tuple[Decision, str]:
    """The third pass alone (it takes longest: 0.25 s at 4,096 nodes), and what
    changed, in words."""
    if budget is not None and budget.expired():
        return d, ""
    d, n = GreedyPlanner(problem).cheaper_placements(d, budget)
    return d, f"{n} move(s) to cheaper victims" if n else ""
