"""Which gangs of the first tier get a network block or NVLink domain: a small CP-SAT
model solved before the greedy plans (docs/planner.md, section 2).

A gang that keeps one network block or NVLink domain (R2's ``same_block``,
``same_nvlink_domain``) needs that many nodes inside one group that can each host
one of its shards. The greedy planner takes a tier's jobs largest first and gives
each the group it finds cheapest; where the groups with room are few, the first
gangs can leave the later ones no group with enough room where another choice of
groups would have placed more of them (a packing problem; on the 12,500-node
benchmark tick one more 7-node tier-1 gang). This model decides how many gangs of
each class (shape and node count) of the first tier go to each group, within the
group's nodes that could host a shard of the class (on GPUs free or held by jobs
the class may evict, as at the start of the tick), most GPUs first, and the
highest-priority gangs of a class first. Where it leaves some out, the greedy
variants place the gangs it chose before the other jobs of the tier
(``Problem.packed``, ``GreedyPlanner(first=...)``); the greedy planner still
decides where every job goes under every rule (the model leaves out the storage
limit, the budgets, the R15 window and the tier's other jobs), and a plan is kept
only where it ranks higher. Only the first tier: the later tiers' room depends on
where the tiers before them went; and only where no node can hold two of the
gangs' shards (the model counts nodes).

The model is a relaxation of the tier's placements, so it bounds the tier's GPUs:
its other jobs that may start at all their GPUs, and the gangs at the most a
packing places (CP-SAT's bound). A plan made without the whole model reports it
(planner/solver/cpsat.py, like the bound proved on the other core).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass

from ortools.sat.python import cp_model

from models.rules import gang_group
from planner.core.budget import Budget
from planner.core.problem import PendingInfo, Problem
from planner.solver.bound import BoundResult
from planner.solver.cpmodel import CpModel
from planner.solver.model import make_solver
from planner.solver.speed import scaled

# the model's time at most, on the benchmark machine; it is optimal within a few
# milliseconds on the benchmark clusters (up to 52 gangs in 780 blocks)
PACK_S = 0.1
# the most patterns (gangs per class that fit one group together) the model holds; more:
# no packing
MAX_PATTERNS = 20_000


@dataclass
class Packing:
    """What :func:`pack_gangs` found for the first ``tier``: ``first``, the gangs (job
    ids) to place before the other jobs of the tier (empty where the model places
    every gang, or gave no answer); ``gangs`` of the tier that keep a group, how
    many the model places and their GPUs, CP-SAT's status, and the seconds taken."""

    tier: int = 0
    first: frozenset[str] = frozenset()
    gangs: int = 0
    placed: int = 0
    gpus: int = 0
    status: str = ""
    seconds: float = 0.0
    # the most GPUs of the tier any plan admits, where the model bounds it (None: not)
    bound: int | None = None
    # made after the first greedy plan, for its bound alone (cpsat._Run.late_pack)
    after: bool = False

    def bounds(self) -> dict[str, float]:
        """The bound by objective item (the tier's GPUs; none where there is no
        bound), as Problem.packed_bound holds it."""
        return {} if self.bound is None else {f"tier-{self.tier} GPUs": float(self.bound)}

    def proof(self, values: dict[str, float]) -> BoundResult | None:
        """The tier's bound as a proof for a plan with these objective item values
        (bound.item_values): the tier's GPUs, the first item a plan may admit any
        of; None where there is no bound."""
        items = [(name, float(values.get(name, 0.0)), bnd, "PACKED")
                 for name, bnd in self.bounds().items()]
        return BoundResult(items=items, seconds=self.seconds).judge(values) if items else None

    def said(self) -> str:
        """For solver.detail, where the model left gangs out."""
        if not self.first:
            return ""
        return (f"CP-SAT packed tier {self.tier}'s gangs that keep a block or NVLink "
                f"domain: {self.placed} of {self.gangs} fit the groups with room "
                f"({self.status.lower()}, {self.seconds:.2f} s), and the greedy plans "
                "place them first")


def top_gangs(problem: Problem) -> tuple[int, list[PendingInfo], int]:
    """The first tier with a pending job that may start, its gangs that keep a group
    (by id), and the GPUs of all its jobs that may start."""
    ready = [i for i in problem.pending.values() if i.held_until is None and i.candidates]
    if not ready:
        return 0, [], 0
    tier = min(i.job.tier for i in ready)
    mine = [i for i in ready if i.job.tier == tier]
    return tier, sorted((i for i in mine if i.job.nodes > 1
                         and (i.job.same_block or i.job.same_nvlink_domain)),
                        key=lambda i: i.job.id), sum(i.job.total_gpus for i in mine)


def pack_gangs(problem: Problem, budget: Budget, *, deterministic: bool = False,
               seed: int = 0) -> Packing:
    """The packing of the first tier's gangs that keep a group (module docstring);
    nothing to do where it has fewer than two."""
    t0 = time.perf_counter()
    tier, gangs, demand = top_gangs(problem)
    out = Packing(tier=tier, gangs=len(gangs))
    if len(gangs) < 2:
        return out
    classes: dict[tuple, list[PendingInfo]] = defaultdict(list)
    caps: dict[tuple, dict[tuple, int]] = {}  # shape -> group -> nodes that host a shard
    hosts: dict[tuple, set[int]] = defaultdict(set)  # group -> nodes that host any shard
    # rights -> the usable nodes alike for every shape (the same layout and room), and
    # those nodes split by group per kind of group (same_block, same_nvlink_domain)
    alike: dict[frozenset[int], dict[tuple[int, int], list[int]]] = {}
    split: dict[tuple, dict[tuple, list[int]]] = {}
    seen: dict[int, tuple[int, set[int] | None]] = {}  # candidate list -> _members
    # only where no node holds two shards (each more than half its GPUs)
    whole = True
    nodes = problem.nodes
    for i in gangs:
        j = i.job
        shape = (j.gpus_per_node, i.need_nvlink, j.same_block, j.same_nvlink_domain,
                 i.rights, id(i.candidates))
        classes[(shape, j.nodes)].append(i)
        if shape in caps:
            continue
        by_kind = alike.get(i.rights)
        if by_kind is None:
            by_kind = alike[i.rights] = _alike(problem, _rooms(problem, i.rights))
        k, nvlink, sb, sd = j.gpus_per_node, i.need_nvlink, j.same_block, j.same_nvlink_domain
        if id(i.candidates) not in seen:
            seen[id(i.candidates)] = _members(problem, i.candidates)
        most_gpus, members = seen[id(i.candidates)]
        if 2 * k <= most_gpus:
            whole = False
        count: dict[tuple, int] = defaultdict(int)
        for kind, ns in by_kind.items():
            if kind[1].bit_count() < k or not nodes[ns[0]].fits(kind[1], k, nvlink):
                continue
            groups = split.get((i.rights, kind, sb, sd))
            if groups is None:
                groups = split[(i.rights, kind, sb, sd)] = defaultdict(list)
                for ni in ns:
                    groups[gang_group(nodes[ni].node, j)].append(ni)
            for g, gns in groups.items():
                if members is not None:
                    gns = [ni for ni in gns if ni in members]
                    if not gns:
                        continue
                count[g] += len(gns)
                hosts[g].update(gns)
        caps[shape] = count
    if not whole:  # (the model counts nodes, not GPUs: it would leave out gangs that fit)
        out.status = "SHARED"
        out.seconds = time.perf_counter() - t0
        return out
    most = {g: len(ns) for g, ns in hosts.items()}
    # the tier's jobs that may start but these gangs: at most all their GPUs
    others = demand - sum(i.job.total_gpus for i in gangs)
    if _all_fit(classes, caps, most):  # (the order stays: no model needed)
        out.placed = out.gangs
        out.gpus = sum(i.job.total_gpus for i in gangs)
        out.status = "ALL"  # (no bound: every job of the tier at all its GPUs says nothing)
        out.seconds = time.perf_counter() - t0
        return out
    placed, out.gpus, gpus_bound, out.status = _solve(classes, caps, most, budget,
                                                      deterministic, seed)
    if out.status:
        out.bound = others + gpus_bound
        first: list[str] = []
        for key, jobs in classes.items():
            jobs.sort(key=lambda i: (-i.job.priority, i.job.id))
            first += [i.job.id for i in jobs[:placed.get(key, 0)]]
        out.placed = len(first)
        if out.placed < len(gangs):
            out.first = frozenset(first)
    out.seconds = time.perf_counter() - t0
    return out


def _rooms(problem: Problem, rights: frozenset[int]) -> dict[int, int]:
    """Per usable node, the GPUs free or held by evictable jobs of a tier in
    ``rights``, as a mask (from Problem.let_go, tallied as the problem was built)."""
    out = {nd.idx: nd.free for nd in problem.nodes if nd.node.state == "up"}
    now = problem.let_go()[""]
    for t in rights:
        for ni, m in now.get(t, {}).items():
            if ni in out:
                out[ni] |= m
    return out


def _members(problem: Problem, cands: list[int]) -> tuple[int, set[int] | None]:
    """The most GPUs of a node of ``cands``, and ``cands`` as a set (None where it
    holds every node: no look-up per node then)."""
    nodes = problem.nodes
    most = max((nodes[ni].node.gpus for ni in cands), default=0)
    return most, None if len(cands) == len(nodes) else set(cands)


def _alike(problem: Problem, rooms: dict[int, int]) -> dict[tuple[int, int], list[int]]:
    """The nodes of ``rooms`` by (layout, room): a shard fits all of them or none."""
    out: dict[tuple[int, int], list[int]] = defaultdict(list)
    nodes = problem.nodes
    for ni, r in rooms.items():
        out[(id(nodes[ni].layout), r)].append(ni)
    return out


def _all_fit(classes: dict[tuple, list[PendingInfo]], caps: dict[tuple, dict[tuple, int]],
             most: dict[tuple, int]) -> bool:
    """Do the gangs fit the groups together as the model counts room, dealt largest
    first, each to the group whose room for its shape it leaves smallest (then no
    packing can place more, and the model is not needed)?"""
    used: dict[tuple, dict[tuple, int]] = defaultdict(lambda: defaultdict(int))
    total: dict[tuple, int] = defaultdict(int)  # group -> nodes taken, any shape
    for (shape, nodes), jobs in sorted(classes.items(), key=lambda kv: -kv[0][1]):
        for _ in jobs:
            best = None
            for g, room in caps[shape].items():
                left = min(room - used[g][shape], most[g] - total[g]) - nodes
                if left >= 0 and (best is None or (left, repr(g)) < best[0]):
                    best = ((left, repr(g)), g)
            if best is None:
                return False
            used[best[1]][shape] += nodes
            total[best[1]] += nodes
    return True


def _solve(classes: dict[tuple, list[PendingInfo]], caps: dict[tuple, dict[tuple, int]],
           most: dict[tuple, int], budget: Budget, deterministic: bool, seed: int
           ) -> tuple[dict[tuple, int], int, int, str]:
    """How many gangs of each class the packing places, their GPUs, the most GPUs a
    packing places (CP-SAT's bound), and CP-SAT's status ("" where it found no
    solution in time, or the model would be too big)."""
    # Groups with the same room for every shape (and for all of them together) are
    # alike: per kind of group, how many of its groups take each maximal pattern
    # (gangs per class that fit one group together: each shape's within the group's
    # nodes that host one of its shards, all within the nodes that host any). A class
    # places at most its gangs and at most as many as the patterns chosen hold.
    # (shapes in a canonical order, whatever the order of the snapshot's records: by
    # their fields, rights and candidate nodes; R14)
    canon = {key[0]: (*key[0][:4], tuple(sorted(key[0][4])), tuple(jobs[0].candidates))
             for key, jobs in classes.items()}
    shapes = sorted(canon, key=canon.__getitem__)
    order = sorted(classes, key=lambda c: (shapes.index(c[0]), c[1], classes[c][0].job.id))
    kinds: dict[tuple[int, ...], int] = defaultdict(int)  # room per shape, all -> groups
    for g in set().union(*(caps[s] for s in shapes)):
        kinds[(*(caps[s].get(g, 0) for s in shapes), most[g])] += 1
    m = CpModel()
    holds: dict[tuple, list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
    patterns = 0
    for ki, (room, count) in enumerate(sorted(kinds.items())):
        found = _patterns(order, [shapes.index(c[0]) for c in order], room,
                          [len(classes[c]) for c in order])
        patterns += len(found)
        if patterns > MAX_PATTERNS:
            return {}, 0, 0, ""
        ys = []
        for pi, pat in enumerate(found):
            y = m.new_int_var(0, count, f"y{ki}_{pi}")
            ys.append(y)
            for c, n in zip(order, pat, strict=True):
                if n:
                    holds[c].append((n, y))
        if len(ys) > 1:
            m.add(sum(ys) <= count)
    placed = {c: m.new_int_var(0, len(classes[c]), f"p{ci}") for ci, c in enumerate(order)
              if holds[c]}
    if not placed:
        return {}, 0, 0, "NONE"
    for c, x in placed.items():
        m.add(x <= sum(n * y for n, y in holds[c]))
    m.maximize(sum(c[1] * c[0][0] * x for c, x in placed.items()))
    limit = min(budget.left(), scaled(PACK_S)) if not deterministic else PACK_S
    solver = make_solver(limit, deterministic, 1, seed, patterns + len(placed))
    st = solver.solve(m)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return {}, 0, 0, ""
    best = int(solver.objective_value)
    return ({c: int(solver.value(x)) for c, x in placed.items()}, best,
            best if st == cp_model.OPTIMAL else math.floor(solver.best_objective_bound + 1e-6),
            solver.status_name(st))


def _patterns(order: list[tuple], shape_of: list[int], room: tuple[int, ...],
              supply: list[int]) -> list[tuple[int, ...]]:
    """The maximal patterns of one kind of group: gangs per class (``order``: (shape,
    nodes) each, of shape ``shape_of``) that fit its ``room`` (nodes per shape, then the
    nodes that host any shape) together, at most ``supply`` of each, none of which
    holds one more gang."""
    *per_shape, most = room
    out: list[tuple[int, ...]] = []
    cnt = [0] * len(order)
    used = [0] * len(per_shape)
    # (only the classes one gang of which fits: the others stay at 0)
    live = [ci for ci in range(len(order))
            if supply[ci] and order[ci][1] <= min(per_shape[shape_of[ci]], most)]
    if not live:
        return []

    def fits(ci: int) -> bool:
        nodes = order[ci][1]
        return (cnt[ci] < supply[ci] and used[shape_of[ci]] + nodes <= per_shape[shape_of[ci]]
                and sum(used) + nodes <= most)

    def walk(li: int) -> None:
        if len(out) > MAX_PATTERNS:
            return
        if li == len(live):
            if not any(fits(c) for c in live):
                out.append(tuple(cnt))
            return
        ci = live[li]
        k = 0
        while True:
            walk(li + 1)
            if not fits(ci):
                break
            cnt[ci] += 1
            used[shape_of[ci]] += order[ci][1]
            k += 1
        cnt[ci] -= k
        used[shape_of[ci]] -= k * order[ci][1]

    walk(0)
    return out
