"""Large-neighbourhood search (planner/solver/lns.py): what a round keeps and frees, that
it improves a plan across neighbourhoods, that it never returns a worse or an
invalid plan, and that ``plan()`` uses it when the whole model does not fit.

Conventions as in test_planner_cases.py: 8-GPU NVSwitch nodes, Monday
2026-11-30 08:00Z, running jobs started at 04:00 (past every tier's min runtime),
checkpoints with a signal, so a victim without a checkpoint size costs
``8 x restore_s``.
"""

from __future__ import annotations

from typing import Any

import pytest

import planner.solver.cpsat as cpsat_mod
from models import load_snapshot
from planner import plan
from planner.checks.assemble import assemble
from planner.checks.verify import verify
from planner.core.budget import Budget
from planner.core.decision import Decision, objective_of
from planner.core.problem import build_problem
from planner.heuristics.greedy import GreedyPlanner
from planner.sim.generate import generate
from planner.solver import portfolio
from planner.solver.lns import improve, neighbourhoods, sub_problem

NOW = "2026-11-30T08:00:00Z"
OLD = "2026-11-30T04:00:00Z"
ALL8 = list(range(8))


def _snap(nodes: list[dict], jobs: list[dict], policy: dict | None = None,
          storage: list[dict] | None = None) -> dict[str, Any]:
    return {"version": 1, "now": NOW, "storage": storage or [], "nodes": nodes,
            "jobs": jobs, "policy": policy or {}}


def _victim(jid: str, on: str, restore: float, size_gb: float = 0.0) -> dict[str, Any]:
    return {"id": jid, "tier": 3, "state": "running", "gpus_per_node": 8, "nodes": 1,
            "started_at": OLD, "checkpoint": {"restore_s": restore, "size_gb": size_gb},
            "placement": [{"node": on, "gpus": ALL8}]}


def _pending(jid: str, nodes: int = 1, priority: int = 0) -> dict[str, Any]:
    return {"id": jid, "tier": 1, "state": "pending", "gpus_per_node": 8, "nodes": nodes,
            "priority": priority}


def _decision(problem: Any, victims: set[str], placed: dict[str, list[str]]) -> Decision:
    return Decision(set(victims), {j: [(problem.node_index[n], 0xFF) for n in ns]
                                   for j, ns in placed.items()})


def test_sub_problem_keeps_what_crosses_the_area() -> None:
    # n1, n2 on storage fs-a, n3, n4 on fs-b (10 GB/s each); every node holds one
    # tier-3 8-GPU victim with a 300 GB checkpoint. The plan: tier-1 j1 on n1
    # (evicting v1) and the 2-node tier-1 gang g on n2 + n3 (evicting v2, v3).
    # Re-solving the area {n1, n2}:
    # - g has a shard on n3, outside: it stays, and so do v3 (on n3) and v2 (g
    #   uses its GPUs); j1 and v1 are decided again; v4 (on n4) may not be evicted;
    # - storm: grace max 180 s, safety 2, no barrier: F <= 180 / 2 x 10 = 900 GB on
    #   a target. v2 stays on fs-a with 300 GB, so v1 may add 900 - 300 = 600 GB;
    # - budgets: 5 evictions, 2 stay: 3 left; 75% of 32 GPUs = 24, 16 stay: 8 GPUs
    #   left = 8 / 32 = 0.25 of the cluster.
    nodes = [{"id": f"n{i}", "gpus": 8, "storage": "fs-a" if i < 3 else "fs-b"}
             for i in range(1, 5)]
    jobs = [_victim(f"v{i}", f"n{i}", 100.0, 300.0) for i in range(1, 5)]
    jobs += [_pending("j1"), _pending("g", nodes=2)]
    policy = {"grace": {"min_s": 60, "max_s": 180, "safety": 2},
              "max_evictions_per_tick": 5, "max_evicted_gpu_fraction": 0.75}
    storage = [{"id": "fs-a", "write_gb_per_s": 10.0}, {"id": "fs-b", "write_gb_per_s": 10.0}]
    problem = build_problem(load_snapshot(_snap(nodes, jobs, policy, storage)))
    d = _decision(problem, {"v1", "v2", "v3"}, {"j1": ["n1"], "g": ["n2", "n3"]})
    area = frozenset({problem.node_index["n1"], problem.node_index["n2"]})
    sub, stay, again = sub_problem(problem, d, area)
    assert stay.victims == {"v2", "v3"} and set(stay.placements) == {"g"}
    assert again.victims == {"v1"} and set(again.placements) == {"j1"}
    assert set(sub.pending) == {"j1"}
    assert sorted(problem.nodes[i].node.id for i in sub.pending["j1"].candidates) == ["n1", "n2"]
    assert set(sub.running) == {"v1", "v4"}
    assert sub.running["v1"].evictable and sub.running["v1"].storm_cap_gb == pytest.approx(600.0)
    assert not sub.running["v4"].evictable
    assert sub.policy.max_evictions_per_tick == 3
    assert sub.policy.max_evicted_gpu_fraction == pytest.approx(0.25)


def test_sub_problem_budget_used_up_by_what_stays() -> None:
    # One eviction allowed, and the plan's victim v2 on n2 stays (its job j2 is outside
    # the area {n1}): the area may evict nothing more.
    nodes = [{"id": "n1", "gpus": 8}, {"id": "n2", "gpus": 8}]
    jobs = [_victim("v1", "n1", 100.0), _victim("v2", "n2", 100.0),
            _pending("j1"), _pending("j2")]
    policy = {"max_evictions_per_tick": 1, "max_evicted_gpu_fraction": 0.6}
    problem = build_problem(load_snapshot(_snap(nodes, jobs, policy)))
    d = _decision(problem, {"v2"}, {"j2": ["n2"]})
    sub, stay, _again = sub_problem(problem, d, frozenset({problem.node_index["n1"]}))
    assert stay.victims == {"v2"}
    assert sub.policy.max_evictions_per_tick == 0
    # 60% of 16 = 9.6 -> 9 GPUs; v2's 8 stay: 1 GPU left = 1/16 of the cluster
    assert sub.policy.max_evicted_gpu_fraction == pytest.approx(1 / 16)


def test_neighbourhoods_follow_storage_targets_and_blocks() -> None:
    # Seven up nodes and one down node: fs-a holds blocks b1 (n1, n2) and b2 (n3, n4,
    # n5), fs-b holds b3 (n6, n7) and the down n8. With neighbourhoods of 4 nodes the
    # groups hold at most 2: b1 = [n1, n2]; b2 does not fit in one, so it is cut into
    # [n3, n4] and [n5]; fs-b starts a new group [n6, n7] (n8 is not usable). Each
    # neighbourhood joins a group and the next, the last wrapping to the first.
    nodes = [{"id": f"n{i}", "gpus": 8, "storage": "fs-a" if i <= 5 else "fs-b",
              "block": "b1" if i <= 2 else "b2" if i <= 5 else "b3"} for i in range(1, 9)]
    nodes[7]["state"] = "down"
    storage = [{"id": "fs-a", "write_gb_per_s": 10.0}, {"id": "fs-b", "write_gb_per_s": 10.0}]
    problem = build_problem(load_snapshot(_snap(nodes, [], storage=storage)))
    got = [sorted(problem.nodes[i].node.id for i in a) for a in neighbourhoods(problem, 4)]
    assert got == [["n1", "n2", "n3", "n4"], ["n3", "n4", "n5"], ["n5", "n6", "n7"],
                   ["n1", "n2", "n6", "n7"]]


def test_improve_moves_a_job_to_a_cheaper_victim_in_the_next_group() -> None:
    # Four nodes, one tier-3 victim each: restore 100, 400, 200, 300 s, so costs
    # 800, 3200, 1600 and 2400 GPU-s. Two tier-1 8-GPU jobs; the plan to improve puts
    # them on n1 and n2 (800 + 3200 = 4000). With neighbourhoods of 2 nodes the groups
    # are single nodes and the areas {n1,n2}, {n2,n3}, {n3,n4}, {n4,n1}:
    # {n1,n2} cannot do better; {n2,n3} frees the job on n2 and moves it to n3
    # (v3, 1600): 800 + 1600 = 2400, the optimum (the two cheapest victims).
    nodes = [{"id": f"n{i}", "gpus": 8} for i in range(1, 5)]
    jobs = [_victim(f"v{i}", f"n{i}", r) for i, r in zip(range(1, 5), (100.0, 400.0, 200.0, 300.0))]
    jobs += [_pending("a"), _pending("b")]
    snap = load_snapshot(_snap(nodes, jobs))
    problem = build_problem(snap)
    assert [sorted(problem.nodes[i].node.id for i in a) for a in neighbourhoods(problem, 2)] == \
        [["n1", "n2"], ["n2", "n3"], ["n3", "n4"], ["n1", "n4"]]
    d = _decision(problem, {"v1", "v2"}, {"a": ["n1"], "b": ["n2"]})
    res = improve(problem, d, Budget(30.0), size=2)
    o = objective_of(problem, res.decision)
    assert o.admitted_gpus == {"1": 16, "2": 0, "3": 0}
    assert o.eviction_cost_gpu_s == 2400.0 and res.decision.victims == {"v1", "v3"}
    assert res.improved >= 1
    # the deadline is far: every round had its whole CP-SAT time, and was timed
    assert res.whole_round_s is not None and res.whole_round_s > 0
    p = assemble(problem, res.decision, "feasible", cpsat_mod.SolverInfo(engine="t", status="t"))
    assert verify(snap, p) == []


@pytest.mark.parametrize("seed", range(6))
def test_improve_never_worsens_nor_breaks_a_rule(seed: int) -> None:
    # Generated clusters with gangs (multi-node victims and pending gangs cross the
    # areas), a slow storage target per 2 blocks and, for odd seeds, eviction budgets:
    # every result verifies and is lexicographically at least the greedy plan.
    data = generate(nodes=48, pending=40, seed=seed, multinode_share=0.3, blocks_per=4,
                    storage_per_blocks=2)
    if seed % 2:
        data["policy"]["max_evictions_per_tick"] = 6
        data["policy"]["max_evicted_gpu_fraction"] = 0.1
    snap = load_snapshot(data)
    problem = build_problem(snap)
    greedy = GreedyPlanner(problem).solve()
    res = improve(problem, greedy, Budget(30.0), size=12)
    assert res.rounds >= 1
    assert objective_of(problem, res.decision).key() >= objective_of(problem, greedy).key()
    p = assemble(problem, res.decision, "feasible", cpsat_mod.SolverInfo(engine="t", status="t"))
    assert verify(snap, p) == []


def _whole_model_too_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole model's build runs out of time for any model with more than 60
    pending jobs."""
    real = portfolio.CpsatModel

    class SlowWhole(real):  # type: ignore[misc, valid-type]
        def __init__(self, problem: Any, **kw: Any) -> None:
            if len(problem.pending) > 60:
                raise portfolio.BuildTimeout
            super().__init__(problem, **kw)

    monkeypatch.setattr(portfolio, "CpsatModel", SlowWhole)


def test_plan_improves_the_greedy_plan_when_the_whole_model_does_not_fit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The whole model's build runs out of time (forced here: any model with more than
    # 60 pending jobs), the neighbourhood models are small: plan() returns the greedy
    # plan improved by LNS rounds, valid, with solver status LNS. Seed 1's greedy plan
    # can be improved (checked by the assertion on the objective).
    _whole_model_too_slow(monkeypatch)
    monkeypatch.setattr("planner.solver.lns.NEIGHBOURHOOD_NODES", 32)
    data = generate(nodes=128, pending=80, seed=1)
    # the contract objective's plans (thrash.exempt_free_first would trade tier-2
    # admissions for fewer exempt evictions after LNS, as its test shows)
    data["policy"]["thrash"] = {"exempt_free_first": False, "past_budget_gpu_s": 0}
    p = plan(data, time_limit_s=20)
    snap = load_snapshot(data)
    assert verify(snap, p) == []
    problem = build_problem(snap)
    from planner.core.decision import clean

    spare = objective_of(problem, clean(problem, GreedyPlanner(problem, spare_lower=True).solve()))
    assert p.solver.status == "LNS" and p.status == "feasible"
    assert "neighbourhood rounds" in p.solver.detail
    assert p.objective.key() > spare.key()


@pytest.mark.parametrize(("hood", "round_s", "runs"),
                         [(32, 1e9, False), (64, 1e9, True), (32, 12.0, False), (32, 5.0, True)])
def test_lns_on_a_cluster_of_more_than_two_neighbourhoods_needs_two_whole_rounds(
        monkeypatch: pytest.MonkeyPatch, hood: int, round_s: float, runs: bool) -> None:
    # As above, with a whole round's measured time (Rates.round_s) forced up. About 18 s of the 20 s are left
    # for LNS. With neighbourhoods of 32 nodes the 128-node cluster is four of them:
    # LNS runs when two whole rounds fit (5 s), not one (12 s) or none, and the
    # greedy plan goes to ejection moves. With 64-node neighbourhoods it is two (the
    # 256-node benchmark at 0.3 s is such a case): LNS runs what it can.
    _whole_model_too_slow(monkeypatch)
    monkeypatch.setattr(portfolio.RATES, "lns_round_s", round_s)
    monkeypatch.setattr(cpsat_mod, "NEIGHBOURHOOD_NODES", hood)
    monkeypatch.setattr("planner.solver.lns.NEIGHBOURHOOD_NODES", hood)
    data = generate(nodes=128, pending=80, seed=1)
    p = plan(data, time_limit_s=20)
    assert verify(load_snapshot(data), p) == []
    assert ("neighbourhood round" in p.solver.detail) is runs


@pytest.mark.parametrize(("hood", "order"), [(32, ["ejection", "LNS"]), (64, ["LNS", "ejection"])])
def test_ejection_moves_come_before_lns_on_a_cluster_of_more_than_two_neighbourhoods(
        monkeypatch: pytest.MonkeyPatch, hood: int, order: list[str]) -> None:
    # The whole model does not fit (forced). On the 128-node cluster cut into four
    # 32-node neighbourhoods a round re-solves an eighth of the cluster where the
    # ejection moves search all of it: they run first, and LNS on what they leave
    # (20 s: two whole rounds fit). Cut into two 64-node ones, LNS runs first and
    # ejection on its plan. (A second ejection runs only on a plan LNS changed; where
    # a baseline's plan ranked first, ejection ran on the best greedy variant's
    # plan before, as here at 32-node neighbourhoods: the order of first runs.)
    _whole_model_too_slow(monkeypatch)
    monkeypatch.setattr(cpsat_mod, "NEIGHBOURHOOD_NODES", hood)
    monkeypatch.setattr("planner.solver.lns.NEIGHBOURHOOD_NODES", hood)
    ran: list[str] = []
    for cls, name in ((portfolio.Eject, "ejection"), (portfolio.Lns, "LNS")):
        def spy(self: Any, problem: Any, budget: Any, _real: Any = cls.run,
                _name: str = name) -> Any:
            ran.append(_name)
            return _real(self, problem, budget)
        monkeypatch.setattr(cls, "run", spy)
    data = generate(nodes=128, pending=80, seed=1)
    p = plan(data, time_limit_s=20)
    assert verify(load_snapshot(data), p) == []
    assert [r for r in dict.fromkeys(ran) if r in order][:2] == order
