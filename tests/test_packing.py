"""Packing the first tier's gangs that keep a group into the groups with room
(planner/solver/packing.py), and the greedy variants that place the gangs it chose
first.

The cluster, at Monday 2026-11-30 08:00Z: ten free 8-GPU NVSwitch nodes, ``a1``-``a5``
in block ``A`` and ``b1``-``b5`` in block ``B``; nothing runs. Five pending tier-1
gangs keep one block, 8 GPUs a node: ``T`` (4 nodes, 32 GPUs), ``P`` and ``Q`` (3
nodes, 24 GPUs each), ``R`` and ``S`` (2 nodes, 16 GPUs each): 14 nodes for 10.

Largest first, ``T`` takes four nodes of one block (one left there), ``P`` three of
the other (two left), ``Q`` finds no block with three, ``R`` takes the two, ``S``
none: 72 GPUs. The best packing: ``P`` and ``R`` in one block, ``Q`` and ``S`` in the
other, 10 nodes and 80 GPUs; ``T`` (in a block, one node of it left over) is left
out. Placed first, ``P``, ``Q``, ``R`` and ``S`` take every node.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest

from models import load_snapshot
from models.rules import gang_group
from planner import plan
from planner.core.budget import Budget
from planner.core.decision import clean, objective_of
from planner.core.problem import build_problem
from planner.heuristics.greedy import GreedyPlanner
from planner.sim.generate import generate
from planner.solver import cpsat, packing, portfolio
from planner.solver.packing import _patterns, pack_gangs

NOW = "2026-11-30T08:00:00Z"
GANGS = {"T": 4, "P": 3, "Q": 3, "R": 2, "S": 2}


def _snap(gangs: dict[str, int] = GANGS, tier_of: dict[str, int] | None = None
          ) -> dict[str, Any]:
    nodes = [{"id": f"{b.lower()}{i}", "gpus": 8, "nvlink": "nvswitch", "block": b}
             for b in "AB" for i in range(1, 6)]
    jobs = [{"id": j, "tier": (tier_of or {}).get(j, 1), "state": "pending",
             "gpus_per_node": 8, "nodes": n, "priority": 10, "same_block": True,
             "topology": "any"} for j, n in gangs.items()]
    return {"version": 1, "now": NOW, "nodes": nodes, "jobs": jobs, "storage": [],
            "policy": {}}


def test_the_packing_leaves_out_the_gang_that_wastes_a_node() -> None:
    problem = build_problem(load_snapshot(_snap()))
    pk = pack_gangs(problem, Budget(10.0, wall=False), deterministic=True)
    assert (pk.tier, pk.gangs, pk.placed, pk.gpus, pk.status) == (1, 5, 4, 80, "OPTIMAL")
    assert pk.first == frozenset("PQRS")
    assert pk.said().startswith("CP-SAT packed tier 1's gangs that keep a block or NVLink "
                                "domain: 4 of 5 fit the groups with room (optimal, ")


def test_placed_first_the_packed_gangs_take_every_node() -> None:
    problem = build_problem(load_snapshot(_snap()))
    default = clean(problem, GreedyPlanner(problem, spare_lower=True).solve())
    assert sorted(default.placements) == ["P", "R", "T"]
    assert objective_of(problem, default).admitted_gpus["1"] == 72
    packed = clean(problem, GreedyPlanner(problem, spare_lower=True,
                                          first=frozenset("PQRS")).solve())
    assert sorted(packed.placements) == ["P", "Q", "R", "S"]
    assert objective_of(problem, packed).admitted_gpus["1"] == 80
    by_block = {j: {problem.nodes[ni].node.block for ni, _m in parts}
                for j, parts in packed.placements.items()}
    assert all(len(b) == 1 for b in by_block.values())  # (R2: one block each)


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_plan_admits_what_the_packing_finds(deterministic: bool) -> None:
    # the whole model would find 80 as well; the greedy variants do it with the packing
    p = plan(_snap(), time_limit_s=2.0, deterministic=deterministic)
    assert p.objective.admitted_gpus["1"] == 80
    assert sorted(x.job for x in p.placements) == ["P", "Q", "R", "S"]
    assert [d.job for d in p.deferred] == ["T"]


def test_no_packing_where_every_gang_fits_or_the_first_tier_has_one() -> None:
    # four gangs that fit together (3 and 2 nodes in each block), dealt largest first
    # each to the block it leaves least room in: no model, the greedy order stays
    fits = build_problem(load_snapshot(_snap({"T": 3, "P": 2, "R": 3, "S": 2})))
    pk = pack_gangs(fits, Budget(10.0, wall=False), deterministic=True)
    assert (pk.placed, pk.gangs, pk.gpus, pk.status, pk.first) == (4, 4, 80, "ALL", frozenset())
    assert pk.bound is None  # (all the tier's GPUs: no bound worth the name)
    assert pk.said() == ""
    # only the first tier is packed: T alone in tier 1 (the others in tier 2)
    one = build_problem(load_snapshot(_snap(tier_of={"P": 2, "Q": 2, "R": 2, "S": 2})))
    pk = pack_gangs(one, Budget(10.0, wall=False), deterministic=True)
    assert (pk.tier, pk.gangs, pk.status, pk.first) == (1, 1, "", frozenset())


def test_the_maximal_patterns_of_a_group() -> None:
    # classes (shape 0, 4 nodes), (0, 3), (0, 2) with 1, 2 and 2 gangs; a group of 5 nodes:
    # 4 (1 left: nothing fits), 3 + 2, 2 + 2 (1 left); 3 alone is not maximal (2 more fit)
    order = [("s", 4), ("s", 3), ("s", 2)]
    assert sorted(_patterns(order, [0, 0, 0], (5, 5), [1, 2, 2])) == [
        (0, 0, 2), (0, 1, 1), (1, 0, 0)]
    # with one gang of 2 nodes only, 2 + 2 is not there: 2 alone is not maximal either
    # (a 3 fits next to it)
    assert sorted(_patterns(order, [0, 0, 0], (5, 5), [1, 2, 1])) == [(0, 1, 1), (1, 0, 0)]
    assert _patterns(order, [0, 0, 0], (1, 1), [1, 2, 2]) == []


def test_the_packing_bounds_the_first_tiers_gpus() -> None:
    # every job of tier 1 that may start but the gangs (here a 1-node job of 8 GPUs,
    # x1) at all its GPUs, and the gangs at the packing's 80: at most 88
    snap = _snap()
    snap["jobs"].append({"id": "x1", "tier": 1, "state": "pending", "gpus_per_node": 8,
                         "priority": 1})
    problem = build_problem(load_snapshot(snap))
    pk = pack_gangs(problem, Budget(10.0, wall=False), deterministic=True)
    assert (pk.gpus, pk.bound) == (80, 88)
    short = pk.proof({"tier-1 GPUs": 80.0, "tier-2 GPUs": 0.0})
    assert short is not None and short.items == [("tier-1 GPUs", 80.0, 88.0, "PACKED")]
    assert short.gap == pytest.approx(8 / 88)
    reached = pk.proof({"tier-1 GPUs": 88.0})
    assert reached is not None and reached.gap is None and not reached.proven
    assert reached.describe() == ("bound from a relaxation solved with CP-SAT: the plan "
                                  "reaches the bound on tier-1 GPUs; nothing proven on the "
                                  "items after")


def test_no_packing_where_two_shards_could_share_a_node() -> None:
    # 4-GPU shards on 8-GPU nodes: two gangs may share a node, which the model (it
    # counts nodes) does not see; all five gangs fit (14 shards of 4 GPUs, room for 20)
    snap = _snap()
    for j in snap["jobs"]:
        j["gpus_per_node"] = 4
    problem = build_problem(load_snapshot(snap))
    pk = pack_gangs(problem, Budget(10.0, wall=False), deterministic=True)
    assert (pk.status, pk.first, pk.bound) == ("SHARED", frozenset(), None)
    assert pk.proof({"tier-1 GPUs": 0.0}) is None


def test_a_plan_without_the_whole_model_reports_the_packings_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the path of a big cluster (the whole model never fits) on one core (no lane, no
    # bound on the other core): the packing's bound is the plan's, tier 1 reached
    monkeypatch.setattr(cpsat, "NEIGHBOURHOOD_NODES", 0)
    monkeypatch.setattr(portfolio, "SOLVE_TIMES_EXACT", 1e9)
    p = plan(_snap(), time_limit_s=2.0, workers=1)
    assert p.objective.admitted_gpus["1"] == 80
    assert p.solver.status == "RELAXATION" and p.solver.gap is None
    detail = p.solver.detail or ""
    assert "no time left to build and solve the model" in detail
    assert ("bound from a relaxation solved with CP-SAT: the plan reaches the bound on "
            "tier-1 GPUs; nothing proven on the items after in ") in detail
    assert "s packing its gangs, before the greedy plans" in detail


def test_where_the_time_is_too_short_for_the_packing_first_it_bounds_the_plan_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A reserve for assembly and checks of all but 1 ms of the limit leaves the first
    # greedy run less than its least: no packing before it (its gangs placed first
    # would take that run's time). The run places T, P and R, largest first (72
    # GPUs); no time is left to improve the plan (the reserve is not lowered after
    # it). The packing then runs for its bound alone, within the time the reserve
    # holds besides the plan's assembly and checks: at most 80 tier-1 GPUs, gap
    # (80 - 72) / 80, and the plan says so (status RELAXATION, not SKIPPED); its
    # gangs are not placed first.
    monkeypatch.setattr(cpsat, "_reserve", lambda problem, t, det: t - 0.001)
    monkeypatch.setattr(cpsat, "RESERVE_FIT_TIMES", 1e6)
    monkeypatch.setattr(cpsat, "NEIGHBOURHOOD_NODES", 0)
    monkeypatch.setattr(portfolio, "SOLVE_TIMES_EXACT", 1e9)
    ran: list[packing.Packing] = []
    real = cpsat.pack_gangs

    def spy(*a: Any, **kw: Any) -> packing.Packing:
        ran.append(real(*a, **kw))
        return ran[-1]

    monkeypatch.setattr(cpsat, "pack_gangs", spy)
    p = plan(_snap(), time_limit_s=1.0, workers=1)
    assert [(pk.after, pk.bound, pk.first) for pk in ran] == [(True, 80, frozenset())]
    assert sorted(x.job for x in p.placements) == ["P", "R", "T"]
    assert p.objective.admitted_gpus["1"] == 72
    assert p.solver.status == "RELAXATION" and p.solver.gap == pytest.approx(0.1)
    detail = p.solver.detail or ""
    assert ("bound from a relaxation solved with CP-SAT: the plan tier-1 GPUs 72 "
            "against at most 80 in ") in detail
    assert "s packing its gangs, after the first greedy plan" in detail
    assert "CP-SAT packed tier 1's gangs" not in detail
    # in deterministic mode (no clock: no reserve of the kind) the packing runs first
    ran.clear()
    q = plan(_snap(), time_limit_s=1.0, workers=1, deterministic=True)
    assert [pk.after for pk in ran] == [False] and q.objective.admitted_gpus["1"] == 80
    # where the time left after the first run does not hold the packing besides what
    # the plan's assembly and checks are expected to take (here a packing expected to
    # take 10 s per node), it does not run, and nothing is proven
    ran.clear()
    monkeypatch.setattr(cpsat, "PACK_BOUND_NODE_S", 10.0)
    r = plan(_snap(), time_limit_s=1.0, workers=1)
    assert ran == [] and r.objective.admitted_gpus["1"] == 72
    assert r.solver.status == "SKIPPED" and r.solver.gap is None


def test_the_squeaky_wheel_pass_places_the_packed_gangs_first_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # from the largest-first plan (T, P, R; Q and S deferred) a second pass with the
    # deferred jobs first and the packed gangs first too places P, Q, R and S: 80 GPUs
    problem = build_problem(load_snapshot(_snap()))
    default = clean(problem, GreedyPlanner(problem, spare_lower=True).solve())
    problem.packed = frozenset("PQRS")
    again = portfolio.Squeaky({"spare_lower": True}, default).run(
        problem, Budget(10.0, wall=False))
    assert sorted(again.placements) == ["P", "Q", "R", "S"]
    # a variant in the priority order keeps its second pass to the deferred jobs
    seen: list[frozenset[str]] = []

    def spy(problem: Any, d: Any, budget: Any = None, also: frozenset[str] = frozenset(),
            **kw: Any) -> Any:
        seen.append(also)
        return d

    monkeypatch.setattr(portfolio, "squeaky_wheel", spy)
    portfolio.Squeaky({"spare_lower": True, "order": "priority"}, default).run(
        problem, Budget(10.0, wall=False))
    portfolio.Squeaky({"spare_lower": True}, default).run(problem, Budget(10.0, wall=False))
    assert seen == [frozenset(), frozenset("PQRS")]


def test_the_packing_is_the_same_whatever_the_order_of_the_records() -> None:
    # two shapes of gang (U and V ask for H100 nodes: another candidate list), the
    # jobs and nodes listed in another order: the same gangs first, the same bound
    snap = _snap()
    for n in snap["nodes"]:
        n["gpu_type"] = "H100" if n["block"] == "A" else "H200"
    snap["jobs"] += [{"id": u, "tier": 1, "state": "pending", "gpus_per_node": 8, "nodes": 2,
                      "priority": 10, "same_block": True, "gpu_type": "H100"} for u in "UV"]
    one = pack_gangs(build_problem(load_snapshot(snap)), Budget(10.0, wall=False),
                     deterministic=True)
    snap["jobs"].reverse()
    snap["nodes"].reverse()
    other = pack_gangs(build_problem(load_snapshot(snap)), Budget(10.0, wall=False),
                       deterministic=True)
    assert one.first and (one.first, one.bound, one.gpus) == (other.first, other.bound,
                                                                other.gpus)


def test_the_room_per_group_is_counted_node_by_node(monkeypatch: pytest.MonkeyPatch) -> None:
    # Generated clusters (pools and GPU types: candidate lists that are not every
    # node; down and drained nodes; running jobs of every tier) with most pending
    # gangs keeping a block or an NVLink domain: the nodes per group that could host
    # a shard of each shape (on GPUs free or held by jobs its tier may evict now, in
    # one connected set where it needs NVLink), and per group those that could host
    # any, are what a pass over every candidate node counts
    seen: dict[str, Any] = {}
    real = packing._all_fit
    monkeypatch.setattr(packing, "_all_fit", lambda c, caps, most: (
        seen.update(caps=caps, most=most), real(c, caps, most))[1])
    counted = 0
    for seed in range(40):
        r = random.Random(seed)
        data = generate(nodes=r.choice([16, 48, 96]), pending=r.choice([20, 60]), seed=seed)
        for j in data["jobs"]:
            if j["state"] == "pending" and j["tier"] == 1 and r.random() < 0.5:
                j.update(gpus_per_node=r.choice([5, 8]), nodes=r.choice([2, 3, 4]))
            if j["state"] == "pending" and j.get("nodes", 1) > 1:
                j[r.choice(["same_block", "same_nvlink_domain"])] = r.random() < 0.8
        problem = build_problem(load_snapshot(data))
        seen.clear()
        pack_gangs(problem, Budget(10.0, wall=False), deterministic=True)
        if not seen:
            continue
        caps: dict[tuple, dict[tuple, int]] = {}
        hosts: dict[tuple, set[int]] = defaultdict(set)
        for i in packing.top_gangs(problem)[1]:
            j = i.job
            shape = (j.gpus_per_node, i.need_nvlink, j.same_block, j.same_nvlink_domain,
                     i.rights, id(i.candidates))
            count: dict[tuple, int] = defaultdict(int)
            for ni in i.candidates:
                nd = problem.nodes[ni]
                if nd.node.state != "up":
                    continue
                room = nd.free
                for v in problem.running.values():
                    if v.evictable and v.job.tier in i.rights:
                        room |= dict(v.parts).get(ni, 0)
                if nd.fits(room, j.gpus_per_node, i.need_nvlink):
                    count[gang_group(nd.node, j)] += 1
                    hosts[gang_group(nd.node, j)].add(ni)
            caps[shape] = dict(count)
        assert {s: dict(c) for s, c in seen["caps"].items()} == caps
        assert seen["most"] == {g: len(ns) for g, ns in hosts.items()}
        counted += 1
    assert counted >= 12
