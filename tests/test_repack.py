"""Repacking (planner/repack.py): a placed job's GPUs go to more important
deferred jobs of its tier only when they use every one of those GPUs, may take
them (R7, R10, R3, R2), and raise the priority value; victims never change.

Conventions as in test_planner_cases.py: 8-GPU NVSwitch nodes unless stated,
Monday 2026-11-30 08:00Z, running jobs started at 04:00 (past every tier's min
runtime). Default policy: tier 2 may preempt tier 3.
"""

from __future__ import annotations

from typing import Any

from models import SolverInfo, load_snapshot
from planner import plan
from planner.assemble import assemble, clean, objective_of
from planner.greedy import GreedyPlanner
from planner.problem import build_problem
from planner.repack import repack
from planner.verify import verify

NOW = "2026-11-30T08:00:00Z"
OLD = "2026-11-30T04:00:00Z"
PAIRS = [[0, 1], [2, 3], [4, 5], [6, 7]]


def _snap(nodes: list[dict], jobs: list[dict], policy: dict | None = None) -> dict[str, Any]:
    return {"version": 1, "now": NOW, "storage": [], "nodes": nodes, "jobs": jobs,
            "policy": policy or {}}


def _node(nid: str, block: str = "b1", nvlink: Any = "nvswitch") -> dict[str, Any]:
    return {"id": nid, "gpus": 8, "block": block, "nvlink": nvlink}


def _job(jid: str, priority: int, gpus: int = 8, nodes: int = 1, topology: str = "any",
         **extra: Any) -> dict[str, Any]:
    return {"id": jid, "tier": 2, "state": "pending", "gpus_per_node": gpus, "nodes": nodes,
            "priority": priority, "topology": topology, **extra}


def _greedy_then_repack(snap: dict[str, Any]) -> tuple[Any, Any, Any, int]:
    s = load_snapshot(snap)
    problem = build_problem(s)
    before = clean(problem, GreedyPlanner(problem).solve())
    after, swaps = repack(problem, before)
    p = assemble(problem, after, "feasible", SolverInfo(engine="test", status="TEST"))
    assert verify(s, p) == []
    return problem, before, after, swaps


def test_a_gang_gives_its_nodes_to_two_more_important_jobs() -> None:
    # Two free nodes. The greedy plan takes the 16-GPU gang g (priority 10) first:
    # priority value 10 x 16 = 160; a (20), b (30) and c (5) wait. Repacking fills
    # g's 16 GPUs with b and a (c is less important than g): 30 x 8 + 20 x 8 = 400.
    # Tier-2 GPUs stay 16, nothing is evicted.
    snap = _snap([_node("n1"), _node("n2")],
                 [_job("g", 10, nodes=2), _job("a", 20), _job("b", 30), _job("c", 5)])
    problem, before, after, swaps = _greedy_then_repack(snap)
    assert set(before.placements) == {"g"}
    assert swaps == 1
    assert set(after.placements) == {"a", "b"} and after.victims == set()
    obj = objective_of(problem, after)
    assert obj.admitted_gpus["2"] == 16 and obj.priority_value == 400


def test_only_jobs_that_may_take_a_victims_gpus_get_them() -> None:
    # n1 is held by tier-3 v1. Greedy: j1 (priority 50, preempted 2,000 s ago:
    # past the 1,800 s cooldown, inside the 3,600 s cascade guard) may use free
    # GPUs only and waits; k (10) evicts v1. Repacking cannot give v1's GPUs to
    # j1 (R10); j2 (40) and j3 (30), 4 GPUs each, fill k's 8:
    # 40 x 4 + 30 x 4 = 280 > 10 x 8 = 80. v1 stays the only victim.
    victim = {"id": "v1", "tier": 3, "state": "running", "gpus_per_node": 8, "nodes": 1,
              "started_at": OLD, "checkpoint": {"restore_s": 100},
              "placement": [{"node": "n1", "gpus": list(range(8))}]}
    snap = _snap([_node("n1")],
                 [victim, _job("k", 10),
                  _job("j1", 50, preemptions=1, last_preempted_at="2026-11-30T07:26:40Z"),
                  _job("j2", 40, gpus=4), _job("j3", 30, gpus=4)],
                 {"cascade_guard_s": 3600})
    problem, before, after, swaps = _greedy_then_repack(snap)
    assert set(before.placements) == {"k"} and before.victims == {"v1"}
    assert problem.pending["j1"].rights == frozenset() and problem.pending["j1"].held_until is None
    assert swaps == 1
    assert set(after.placements) == {"j2", "j3"} and after.victims == {"v1"}
    assert objective_of(problem, after).priority_value == 280


def test_no_swap_that_would_leave_gpus_idle() -> None:
    # k (8 GPUs, priority 10) holds n1; the only more important deferred job needs
    # 4 GPUs: swapping would drop tier-2 GPUs from 8 to 4, so nothing changes.
    snap = _snap([_node("n1")], [_job("k", 10), _job("j", 90, gpus=4, nodes=1),
                                 _job("j0", 1, gpus=8)])
    _problem, before, after, swaps = _greedy_then_repack(snap)
    assert set(before.placements) == {"k"}
    assert swaps == 0 and after.placements == before.placements


def test_nvlink_jobs_need_connected_gpus_in_the_freed_set() -> None:
    # n1's NVLink graph is four pairs. k (8 GPUs, topology any, priority 10) holds
    # it. j4 (4 GPUs with NVLink, priority 50) cannot fit in any pair; p1-p4
    # (2 GPUs with NVLink, priority 20) take one pair each: 4 x 2 x 20 = 160 > 80.
    snap = _snap([_node("n1", nvlink=PAIRS)],
                 [_job("k", 10), _job("j4", 50, gpus=4, topology="nvlink")]
                 + [_job(f"p{i}", 20, gpus=2, topology="nvlink") for i in range(1, 5)])
    problem, before, after, swaps = _greedy_then_repack(snap)
    assert set(before.placements) == {"k"}
    assert swaps == 1
    assert set(after.placements) == {"p1", "p2", "p3", "p4"}
    masks = sorted(m for j in after.placements for _n, m in after.placements[j])
    assert masks == [0b11, 0b1100, 0b110000, 0b11000000]
    assert objective_of(problem, after).priority_value == 160


def test_gangs_take_distinct_nodes_and_keep_their_block() -> None:
    # n1 (block b1) and n2 (block b2). The 16-GPU gang k (priority 10) holds both.
    # g, a 2-node gang of 4 GPUs per node (priority 50), and s1, s2 (4 GPUs, 30)
    # fill them: 50 x 8 + 30 x 4 x 2 = 640 > 160, g with one shard on each node.
    # If g must stay inside one block (same_block), it cannot go there, s1 and s2
    # alone fill only 8 of the 16 GPUs, and nothing changes.
    nodes = [_node("n1", block="b1"), _node("n2", block="b2")]
    for same_block, want in ((False, {"g", "s1", "s2"}), (True, {"k"})):
        snap = _snap(nodes, [_job("k", 10, nodes=2),
                             _job("g", 50, gpus=4, nodes=2, same_block=same_block),
                             _job("s1", 30, gpus=4), _job("s2", 30, gpus=4)])
        problem, before, after, swaps = _greedy_then_repack(snap)
        assert set(before.placements) == {"k"}
        assert set(after.placements) == want
        assert swaps == (0 if same_block else 1)
        if not same_block:
            assert sorted(ni for ni, _m in after.placements["g"]) == [0, 1]
            assert objective_of(problem, after).priority_value == 640


def test_the_cpsat_fallback_plan_is_repacked() -> None:
    # With no time for the model, plan() returns the greedy plan after repacking
    # (the first test's snapshot): a and b, priority value 400, not g's 160.
    snap = _snap([_node("n1"), _node("n2")],
                 [_job("g", 10, nodes=2), _job("a", 20), _job("b", 30), _job("c", 5)])
    p = plan(load_snapshot(snap), time_limit_s=0.01)
    assert p.status == "fallback" and p.solver.status == "SKIPPED"
    assert p.solver.detail.endswith("greedy plan returned after 1 repacking swap(s)")
    assert sorted(x.job for x in p.placements) == ["a", "b"]
    assert p.objective.priority_value == 400
