"""What a planner chose, and what follows from it alone.

Every planner (CP-SAT, LNS, the greedy planner and its passes, the baselines)
produces a :class:`Decision`: victims and, per placed job, its GPUs. This module
holds what they all derive from one: the GPUs it takes per node (:func:`used_gpus`),
who uses which victim's GPUs
(:func:`preemptors_of`), the exempt victims (R15, :func:`exempt_victims`), the
objective (:func:`objective_of`) and :func:`clean`, which drops victims no placed
job uses (R7) and enforces the rolling eviction budget (R15) as a last net; and
the passes every CP-SAT and greedy plan takes before it is assembled:
:func:`exempt_free_first`, :func:`first_come` and :func:`best_fit` (objective
item 6). planner/checks/assemble.py turns a decision into the contract's plan.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from dataclasses import dataclass, field

from models import Job, Objective, Plan
from models.rules import priority_value
from planner.core import topology as topo
from planner.core.budget import Budget
from planner.core.problem import PendingInfo, Problem, changed_nodes


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


def victims_under(problem: Problem, victims: set[str], parts: list[tuple[int, int]]) -> set[str]:
    """The ``victims`` that hold some of the GPUs ``parts`` (node index, GPU mask),
    by the problem's owner map."""
    owner = problem.owner
    return {v for ni, m in parts for v, _m in owner.on(ni, m) if v in victims}


def used_gpus(d: Decision) -> dict[int, int]:
    """The GPUs decision ``d``'s placements take, per node (node index -> mask)."""
    used: dict[int, int] = {}
    for parts in d.placements.values():
        for i, m in parts:
            used[i] = used.get(i, 0) | m
    return used


def preemptors_of(problem: Problem, d: Decision) -> dict[str, list[str]]:
    """victim -> placed jobs using at least one of its GPUs."""
    out: dict[str, set[str]] = {v: set() for v in d.victims}
    for j, parts in d.placements.items():
        for v in victims_under(problem, d.victims, parts):
            out[v].add(j)
    return {v: sorted(js) for v, js in out.items()}


def objective_of(problem: Problem, d: Decision) -> Objective:
    tiers = sorted(problem.policy.tiers)
    admitted = {str(t): 0 for t in tiers}
    for j in d.placements:
        job = problem.pending[j].job
        admitted[str(job.tier)] += job.total_gpus
    prio = priority_value(problem.pending[j].job for j in d.placements)
    cost = sum(problem.running[v].cost for v in d.victims)
    tb = problem.thrash
    past = tb.past_budget(len(d.victims)) if tb is not None else 0
    return Objective(admitted_gpus=admitted, priority_value=prio,
                     eviction_cost_gpu_s=round(cost, 6), evictions=len(d.victims),
                     evictions_past_budget=past).with_past_cost(
                         tb.past_gpu_s if tb is not None else 0.0)


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


def can_take(problem: Problem, info: PendingInfo, parts: list[tuple[int, int]]) -> bool:
    """Could the pending job ``info`` have the GPUs ``parts`` (node index, GPU mask)
    as far as its own shape goes: as many nodes as its gang, each one of its candidate
    nodes (R1's GPU type, R4's pools) with its GPUs per node, NVLink-connected where
    it asks for that (R3), in one block and one NVLink domain where it asks for
    that. Whose GPUs they are (R7) is the caller's question."""
    job = info.job
    if len(parts) != job.nodes:
        return False
    cands = problem.candidate_set(info)
    nodes = [problem.nodes[ni] for ni, _m in parts]
    for (ni, m), n in zip(parts, nodes, strict=True):
        if (ni not in cands or m.bit_count() != job.gpus_per_node
                or not n.fits(m, job.gpus_per_node, info.need_nvlink)):
            return False
    if job.same_block and len({n.node.block for n in nodes}) != 1:
        return False
    return not (job.same_nvlink_domain and len({n.node.nvlink_domain for n in nodes}) != 1)


def queue_order(job: Job) -> tuple:
    """A pending job's place in the queue: by ``submitted_at``, a job without one
    first (R16 too counts it as having waited long enough), then by id."""
    at = job.submitted_at
    return (0, at, job.id) if at is not None else (-1, None, job.id)


def first_come(problem: Problem, d: Decision) -> tuple[Decision, int]:
    """Among pending jobs that are alike for the objective (the same tier, priority,
    nodes and GPUs per node), the plan places the first in the queue order: by
    ``submitted_at`` (a job without one first: R16 too counts it as having waited
    long enough), then id. The order is by first submission, not by R16's queue
    start (``Job.queue_start``, which restarts at a preemption): a job put back in
    the queue by a preemption keeps its place before jobs submitted after it. A placed
    job hands its GPUs to a waiting job of its kind earlier in that order when that
    job may take them (:func:`can_take`; not held by R9; for victims' GPUs, rights
    over their tiers under R7, R10 and R16). Every item of the objective stays the
    same (the same tier, GPUs, priority and victims; R15's exemptions too, the tier
    being the same): the CP-SAT model is indifferent among such jobs, and without
    this pass it would start a job submitted seconds after another that keeps
    waiting. Returns the decision and how many jobs changed places (``d`` itself
    and 0 when none did)."""
    pending = problem.pending
    groups: dict[tuple[int, float, int, int], list[str]] = defaultdict(list)
    for j, info in pending.items():
        if info.held_until is None:
            job = info.job
            groups[(job.tier, job.priority, job.nodes, job.gpus_per_node)].append(j)
    out: Decision | None = None
    moved = 0

    def queued(j: str) -> tuple:
        return queue_order(pending[j].job)

    for ids in groups.values():
        placed = sorted((j for j in ids if j in d.placements), key=queued)
        if not placed:
            continue
        waiting = sorted((j for j in ids if j not in d.placements), key=queued)
        if not waiting or queued(waiting[0]) > queued(placed[-1]):
            continue
        if out is None:
            out = Decision(set(d.victims), dict(d.placements))
        for w in waiting:
            info = pending[w]
            for a in reversed(placed):
                if queued(a) < queued(w):
                    break
                parts = out.placements[a]
                if (all(problem.running[v].job.tier in info.rights
                        for v in victims_under(problem, d.victims, parts))
                        and can_take(problem, info, parts)):
                    out.placements[w] = out.placements.pop(a)
                    placed.remove(a)
                    moved += 1
                    break
    return (out, moved) if out is not None and moved else (d, 0)


BEST_FIT_PASSES = 3  # passes of best_fit over the plan's jobs on free GPUs
# nodes best_fit's gathering looks at per shard (the most unpreemptible GPUs first)
GATHER_SCAN = 256


def best_fit(problem: Problem, d: Decision, budget: Budget | None = None
             ) -> tuple[Decision, int]:
    """Objective item 6: placements that keep whole nodes free, for completions and
    for evictions. Only shards of placed jobs that hold GPUs free in the snapshot
    move (onto idle GPUs: free in the snapshot, used by no placement), on the GPUs
    ``topology.best_fit`` picks (NVLink islands kept whole). Two kinds of move:

    - *gathering*: a shard of a job of a tier that is not preemptible (R5) moves to
      the node holding the most GPUs of such work (running or placed), when that is
      more than its own node keeps without it; or, where no idle GPUs fit it there,
      trades places with a shard of the same size of a preemptible tier's job on
      free GPUs there. Work no plan may evict then sits on as few nodes as it can,
      and the others stay whole for a later job that must evict: a big tier-1 job
      finds a node with no tier-1 job on it (on Alibaba's openb trace 1-GPU tier-1
      pods scattered over 28 of 32 nodes kept an 8-GPU tier-1 job waiting 11
      minutes, docs/simulation.md);
    - *best fit*: any shard moves to the node where it leaves the fewest idle GPUs,
      when that is fewer than its node keeps idle without it, and (for an
      unpreemptible job's shard) that node holds at least as much unpreemptible
      work as its node keeps.

    With ``p[n]`` each node's GPUs of unpreemptible work and ``idle[n]`` its idle
    GPUs, a gathering move of ``g`` GPUs from a node left with ``a`` to one with
    ``b > a`` raises ``sum(p[n]**2)`` by ``2g(b - a)`` and a best-fit move raises
    ``sum(idle[n]**2)`` without lowering it: the pair rises in every move, so the
    passes end, and the GPUs a completion frees tomorrow more often make a node
    whole.

    A move keeps each job's tier, GPUs, priority and victims (none of the moved
    shards' GPUs is a victim's), so objective items 1-5 stay the same; the new node
    is one of the job's candidates (R1, R4), connected where it needs NVLink (R3),
    in the gang's block or NVLink domain where it asks for that (``can_take``), and
    free GPUs are every job's to take (R7, R10, R16). CP-SAT's model has no term for
    item 6 and leaves the node of a job on free GPUs to the search; the greedy
    planner takes the best fit job by job, which a later job can undo. Per pass the
    unpreemptible shards on the nodes with the least such work gather first, then
    shards on the nodes with the most idle GPUs fit; at most ``BEST_FIT_PASSES``
    passes, stopping early at the end of ``budget`` (none where it has ended).
    Returns the decision and the number of shards moved (``d`` itself and 0 when
    none moved)."""
    if budget is not None and budget.expired():
        return d, 0  # (its set-up alone passes over every running job and node)
    nodes = problem.nodes
    used: dict[int, int] = defaultdict(int, used_gpus(d))
    movers = [j for j, parts in d.placements.items()
              if all(m & ~nodes[ni].free == 0 for ni, m in parts)]
    if not movers:
        return d, 0
    tiers = problem.policy.tiers
    fixed = {t for t, tp in tiers.items() if not tp.preemptible}  # R5

    def unpreemptible(j: str) -> bool:
        return problem.pending[j].job.tier in fixed

    # GPUs of unpreemptible work per node: running jobs', then the plan's
    prot: dict[int, int] = defaultdict(int)
    for v in problem.running_any_order():
        if v.job.tier in fixed:
            for ni, m in v.parts:
                prot[ni] += m.bit_count()
    for j, parts in d.placements.items():
        if unpreemptible(j):
            for ni, m in parts:
                prot[ni] += m.bit_count()

    def idle(ni: int) -> int:
        return nodes[ni].free & ~used[ni]

    top = max((n.node.gpus for n in nodes), default=0)
    bucket: list[list[int]] = [[] for _ in range(top + 1)]  # idle GPUs -> nodes, sorted
    count: dict[int, int] = {}
    for n in nodes:
        k = idle(n.idx).bit_count()
        if k and n.usable:
            bucket[k].append(n.idx)
            count[n.idx] = k

    def recount(ni: int) -> None:
        k = idle(ni).bit_count()
        old = count.pop(ni, 0)
        if old:
            del bucket[old][bisect_left(bucket[old], ni)]
        if k:
            insort(bucket[k], ni)
            count[ni] = k

    def tightest(info: PendingInfo, parts: list[tuple[int, int]], s: int, a: int,
                 floor: int | None) -> list[tuple[int, int]] | None:
        """Shard ``s`` of ``parts`` moved to the node it leaves the fewest idle GPUs
        on, fewer than the ``a`` its own node keeps, and holding at least ``floor``
        GPUs of unpreemptible work (None: any): the new parts."""
        g = parts[s][1].bit_count()
        cands = problem.candidate_set(info)
        mine = {n for n, _m in parts}
        for k in range(g, min(a + g, top + 1)):  # b = k - g idle left there, b < a
            for nj in bucket[k]:
                if nj in mine or nj not in cands or (floor is not None and prot[nj] < floor):
                    continue
                nd = nodes[nj]
                mask = topo.layout_best_fit(nd.layout, idle(nj), g, info.need_nvlink)
                if mask is None:
                    continue
                new = parts[:s] + [(nj, mask)] + parts[s + 1:]
                if len(new) == 1 or can_take(problem, info, new):
                    return new
        return None

    out = Decision(set(d.victims), dict(d.placements))
    # the preemptible jobs' shards on free GPUs per node, for trades
    others: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for j in movers:
        if not unpreemptible(j):
            for s, (ni, _m) in enumerate(out.placements[j]):
                others[ni].append((j, s))

    def move(j: str, s: int, new: list[tuple[int, int]]) -> None:
        """Shard ``s`` of ``j`` from its node to idle GPUs of another (``new``, its
        parts after), the node indexes (used, count, prot, others) kept up."""
        (ni, m), (nj, mask) = out.placements[j][s], new[s]
        used[ni] &= ~m
        used[nj] |= mask
        out.placements[j] = new
        recount(ni)
        recount(nj)
        if unpreemptible(j):
            prot[ni] -= m.bit_count()
            prot[nj] += m.bit_count()
        else:
            others[ni] = [(j2, s2) for j2, s2 in others[ni] if (j2, s2) != (j, s)]
            others[nj].append((j, s))

    def gather(j: str, s: int, ranked: list[int]) -> bool:
        """Shard ``s`` of the unpreemptible job ``j`` to the node with the most
        unpreemptible work above what its node keeps without it (docstring above):
        the first that takes it of the first GATHER_SCAN nodes of ``ranked`` (the
        pass's order, most unpreemptible work first)."""
        info = problem.pending[j]
        parts = out.placements[j]
        ni, m = parts[s]
        g = m.bit_count()
        keep = prot[ni] - g
        cands = problem.candidate_set(info)
        mine = {n for n, _m in parts}
        for nj in ranked[:GATHER_SCAN]:
            if prot[nj] <= keep or nj in mine or nj not in cands:
                continue
            nd = nodes[nj]
            mask = (topo.layout_best_fit(nd.layout, idle(nj), g, info.need_nvlink)
                    if count.get(nj, 0) >= g else None)
            if mask is not None:
                new = parts[:s] + [(nj, mask)] + parts[s + 1:]
                if len(new) == 1 or can_take(problem, info, new):
                    move(j, s, new)
                    return True
            for k, (j2, s2) in enumerate(others.get(nj, ())):
                parts2 = out.placements[j2]
                m2 = parts2[s2][1]
                if m2.bit_count() != g or any(n == ni for n, _m in parts2):
                    continue
                new = parts[:s] + [(nj, m2)] + parts[s + 1:]
                new2 = parts2[:s2] + [(ni, m)] + parts2[s2 + 1:]
                if (can_take(problem, info, new)
                        and can_take(problem, problem.pending[j2], new2)):
                    out.placements[j], out.placements[j2] = new, new2
                    del others[nj][k]
                    others[ni].append((j2, s2))
                    prot[ni] -= g
                    prot[nj] += g
                    return True
        return False

    moved = 0
    for _ in range(BEST_FIT_PASSES):
        moves = 0
        if fixed:
            order = sorted((prot[ni], j, s) for j in movers if unpreemptible(j)
                           for s, (ni, _m) in enumerate(out.placements[j]))
            # the nodes a shard may go to (idle GPUs, or a preemptible job's shard
            # to trade with) holding unpreemptible work, the most first
            ranked = sorted((nj for nj in set(count) | {n for n, v in others.items() if v}
                             if prot[nj] > 0), key=lambda nj: (-prot[nj], count.get(nj, 0), nj))
            for _p, j, s in order if ranked else ():
                if budget is not None and budget.expired():
                    break
                moves += gather(j, s, ranked)
        order = sorted(((-count.get(ni, 0), j, s) for j in movers
                        for s, (ni, _m) in enumerate(out.placements[j])))
        for _neg, j, s in order:
            if budget is not None and budget.expired():
                break
            parts = out.placements[j]
            ni, m = parts[s]
            a = count.get(ni, 0)  # idle GPUs on its node, its own shard not counted
            found = tightest(problem.pending[j], parts, s, a,
                             prot[ni] - m.bit_count() if unpreemptible(j) else None) if a else None
            if found is None:
                continue
            move(j, s, found)
            moves += 1
        moved += moves
        if not moves or (budget is not None and budget.expired()):
            break
    return (out, moved) if moved else (d, 0)


def moved_note(moved: int) -> str:
    """What a plan's ``solver.detail`` says when :func:`exempt_free_first` moved jobs."""
    return (f"{moved} exempt job(s) moved to free GPUs a job of another tier held "
            "(thrash.exempt_free_first)")


def exempt_free_first(problem: Problem, d: Decision) -> tuple[Decision, int]:
    """``thrash.exempt_free_first`` (an extension of R15 and R16, a planner's choice,
    not a rule). A job of an exempt tier placed on victims' GPUs trades places with a
    placed job of another tier that holds only GPUs free in the snapshot, when it
    can use them (the same shape, on nodes it may run on, NVLink and block needs
    met), and when that job got there by the exemption: the plan's victims would not
    fit in what the window has left were none of them exempt (R15), the job may
    take only free GPUs (R16's patience, R10's cascade guard), or it may not evict
    one of the exempt job's victims itself (R7: a tier-2 job that starts on free GPUs
    while a tier-1 job evicts a running tier-2 job for want of them has in effect
    displaced a job of its own tier). That job then takes the exempt job's former
    GPUs where its rights and patience allow (their victims now count against the
    budget), else it waits; ``clean`` then drops victims nobody uses and re-checks
    R15. Without it, an objective that admits as many GPUs as it can sends the
    exempt job to victims and the other tier's job to the free GPUs: exempt
    evictions that make room for the other tiers, past the budget, before their
    patience ran out or where their rights stop, and an exempt job that waits for
    its victims' flush where free GPUs would have started it at once
    (docs/simulation.md, "The default policy").

    Returns the decision and the number of exempt jobs moved (``d`` itself and 0
    when none moves)."""
    pol = problem.policy.thrash
    tb = problem.thrash
    if tb is None or pol is None or not pol.exempt_free_first or not d.victims:
        return d, 0
    # past: exemptions let victims past what the window has left
    past = len(d.victims) > tb.left or _victim_gpus(problem, d.victims) > tb.gpus_left
    pending = problem.pending
    def under(parts: list[tuple[int, int]]) -> set[str]:
        return victims_under(problem, d.victims, parts)

    held: dict[int, int] = {}  # node -> the victims' GPUs there
    for v in d.victims:
        for ni, m in problem.running[v].parts:
            held[ni] = held.get(ni, 0) | m

    def on_victims(parts: list[tuple[int, int]]) -> bool:
        return any(held.get(ni, 0) & m for ni, m in parts)

    movers = sorted((j for j, parts in d.placements.items()
                     if tb.exempt_tiers and pending[j].job.tier in tb.exempt_tiers
                     and on_victims(parts)),
                    key=lambda j: (pending[j].job.tier, -pending[j].job.total_gpus,
                                   -pending[j].job.priority, j))
    if not movers:
        return d, 0
    donors = sorted((j for j, parts in d.placements.items()
                     if pending[j].job.tier not in tb.exempt_tiers and not on_victims(parts)),
                    key=lambda j: (-pending[j].job.tier, pending[j].job.priority, j))
    if not donors:
        return d, 0
    # donors that got in by the exemption whoever the mover's victims are (past the
    # window, or on free GPUs only); the others only from a mover with a victim
    # their rights do not reach
    eager = {q for q in donors
             if past or pending[q].guarded or pending[q].patient_until is not None}
    tier_of = {v: problem.running[v].job.tier for v in d.victims}

    def fits(j: str, parts: list[tuple[int, int]]) -> bool:
        return can_take(problem, pending[j], parts)

    # a donor can take a mover's place only with the mover's shape (nodes, GPUs on
    # each): donors by shape, in their order, so each mover tries only those
    by_shape: dict[tuple[int, ...], list[str]] = defaultdict(list)
    for q in donors:
        by_shape[tuple(sorted(m.bit_count() for _ni, m in d.placements[q]))].append(q)
    out = Decision(set(d.victims), dict(d.placements))
    moved = 0
    used: set[str] = set()
    # a donor's GPUs stay the same until it is used, and whether a mover can take
    # them depends only on what can_take looks at and the tiers of the mover's
    # victims: movers alike in that resume their donor list where the last of them
    # stopped (the same donors as a scan from the start, without the checks that
    # failed before)
    start: dict[tuple, int] = {}
    for j in movers:
        info = pending[j]
        job = info.job
        hit = frozenset(tier_of[v] for v in under(d.placements[j]))
        alike = (id(info.candidates), info.need_nvlink, job.nodes, job.gpus_per_node,
                 job.same_block, job.same_nvlink_domain, hit)
        shaped = by_shape.get((job.gpus_per_node,) * job.nodes, [])
        for k in range(start.get(alike, 0), len(shaped)):
            q = shaped[k]
            if (q in used or (q not in eager and hit <= pending[q].rights)
                    or not fits(j, out.placements[q])):
                continue
            start[alike] = k + 1
            used.add(q)
            old = out.placements[j]  # (d's: a mover is no donor, so not moved before)
            out.placements[j] = out.placements.pop(q)
            if hit <= pending[q].rights and fits(q, old):  # (hit: the tiers under old)
                out.placements[q] = old
            moved += 1
            break
        else:
            start[alike] = len(shaped)
    if not moved:
        return d, 0
    return clean(problem, out), moved


def after_trade(problem: Problem, d: Decision) -> tuple[Decision, int]:
    """``d`` cleaned, after :func:`exempt_free_first`, and the number of exempt jobs
    moved (``d`` itself and 0 where none moves): a plan as a planner that keeps plans
    after the trade ranks it (planner/solver/cpsat.py, planner/heuristics/eject.py)."""
    out, moved = exempt_free_first(problem, clean(problem, d))
    return (out, moved) if moved else (d, 0)


def decision_of(problem: Problem, plan: Plan) -> Decision:
    """The decision a plan of this problem carries out (its victims and GPUs)."""
    placements = {}
    for p in plan.placements:
        placements[p.job] = [(problem.node_index[part.node],
                              sum(1 << g for g in part.gpus)) for part in p.placement]
    return Decision({e.job for e in plan.evictions}, placements)


def carried(previous: Problem, d: Decision, problem: Problem) -> Decision | None:
    """The last tick's decision ``d`` (of ``previous``) as a decision of this tick's
    ``problem``, when nothing it rests on changed; else None. It rests on: the
    policy, every node and storage target (the same objects: R11/R12 as before),
    time going forward (R9, R10 and R16 only let go as it does), each placed job
    still pending (the same record), not held (R9) and on its candidate nodes (this
    problem's, reduced or not), each victim still running (the same record) and
    evictable now (R5, R6, R8, R11, R17), and each placed shard on GPUs free now or
    held by the decision's victims, of tiers the job may preempt (R1, R7). R15's
    window may have filled: ``clean`` makes it hold. What else a decision is checked
    for (R2-R4, R11-R13) is the same as when it was made. A scheduler that did not
    carry out the last plan (a dry run, a client asking again) then gets at least as
    good a plan (a loop's hint)."""
    if (not d.placements or problem.now < previous.now
            or changed_nodes(problem.snap, previous) != set()):
        return None
    held: dict[int, list[tuple[int, int]]] = {}  # node -> (tier, GPUs) of the victims
    for v in d.victims:
        now_v, was = problem.running.get(v), previous.running.get(v)
        if now_v is None or was is None or now_v.job is not was.job or not now_v.evictable:
            return None
        for ni, m in now_v.parts:
            held.setdefault(ni, []).append((now_v.job.tier, m))
    taken: dict[int, int] = {}
    for j, parts in d.placements.items():
        info, was_p = problem.pending.get(j), previous.pending.get(j)
        if (info is None or was_p is None or info.job is not was_p.job
                or info.held_until is not None):
            return None
        hosts = problem.candidate_set(info)
        for ni, m in parts:
            room = problem.nodes[ni].free
            for tier, vm in held.get(ni, ()):
                if vm & m:
                    if tier not in info.rights:
                        return None
                    room |= vm
            if ni not in hosts or m & ~room or m & taken.get(ni, 0):
                return None
            taken[ni] = taken.get(ni, 0) | m
    return clean(problem, Decision(set(d.victims), dict(d.placements)))
