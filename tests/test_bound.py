"""The relaxation bound (planner/solver/bound.py, ``plan(bound_s=...)``, ``plan --bound``).

Hand-worked: a tick whose plan the bound proves optimal, and an empty plan whose
gap it gives. Validity over random generated ticks and policies: every planner's
valid plan is a solution of the relaxation (so its optimum bounds every plan, the
whole model's proven optimum among them), and no bound falls below the plan.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from ortools.sat.python import cp_model
from snapshot_parts import random_policy, random_tick

from models import load_snapshot
from planner import plan
from planner.core.budget import Budget
from planner.core.decision import Decision, decision_of
from planner.core.problem import build_problem
from planner.sim.generate import generate
from planner.solver.bound import Relaxation, prove

NOW = "2026-11-30T08:00:00Z"


def _snap() -> dict[str, Any]:
    """n0: tier-3 r3 on all 8 GPUs, 8 h old; n1: tier-3 s3 on 4 GPUs, 2 h old, 4
    GPUs free. Both have the default SIGTERM and no checkpoint size, so an eviction
    costs GPUs x restore_s: r3 8 x 60 = 480 GPU-s, s3 4 x 60 = 240. Pending: a (tier
    1, 8 GPUs), b (tier 2, 4 GPUs).

    a needs a whole node. On n0 (evicting r3) b takes n1's free GPUs: 8/4 GPUs at
    480, one eviction. On n1 (evicting s3) b can only evict r3: 8/4 at 720, two.
    Without a victim nothing places a. So the optimum is 8/4 at 480 with one
    eviction, and the relaxation finds no cheaper way: a 4-GPU shard of b fits n1
    beside a only if a does not take n1."""
    nodes = [{"id": f"n{i}", "gpus": 8, "gpu_type": "H100", "nvlink": "nvswitch"}
             for i in range(2)]

    def running(jid: str, gpus: int, node: str, started: str) -> dict:
        return {"id": jid, "tier": 3, "state": "running", "gpus_per_node": gpus,
                "started_at": started, "checkpoint": {"restore_s": 60},
                "placement": [{"node": node, "gpus": list(range(gpus))}]}

    jobs = [running("r3", 8, "n0", "2026-11-30T00:00:00Z"),
            running("s3", 4, "n1", "2026-11-30T06:00:00Z"),
            {"id": "a", "tier": 1, "state": "pending", "gpus_per_node": 8, "priority": 10,
             "topology": "any"},
            {"id": "b", "tier": 2, "state": "pending", "gpus_per_node": 4, "priority": 5,
             "topology": "any"}]
    return {"version": 1, "now": NOW, "storage": [], "nodes": nodes, "jobs": jobs,
            "policy": {}}


def test_the_bound_proves_the_plan_of_a_hand_worked_tick_optimal() -> None:
    p = plan(_snap(), deterministic=True, bound_s=2.0)
    assert p.objective.admitted_gpus == {"1": 8, "2": 4, "3": 0}
    assert [e.job for e in p.evictions] == ["r3"]
    assert p.objective.eviction_cost_gpu_s == 480.0
    assert p.status == "optimal"
    assert p.solver.gap == 0.0
    assert p.solver.bound == 480.0
    # tier 1, tier 2 (no tier-3 job is pending), priority, cost, evictions
    assert "proves the plan optimal on 5 objective item(s)" in (p.solver.detail or "")


def test_the_bound_gives_the_gap_of_a_plan_that_admits_less_than_it_could() -> None:
    problem = build_problem(load_snapshot(_snap()))
    res = prove(problem, Decision(), Budget(2.0, wall=False), deterministic=True)
    # the empty plan admits no tier-1 GPU where a plan admits 8: gap (8 - 0) / 8
    assert res.items == [("tier-1 GPUs", 0.0, 8.0, "OPTIMAL")]
    assert res.gap == 1.0
    assert not res.proven and res.cost_bound is None
    assert res.describe().endswith("tier-1 GPUs 0 against at most 8")


def test_plan_bound_on_the_command_line_refuses_a_negative_time(capsys: Any) -> None:
    from cli import main

    assert main(["plan", "-", "--bound", "-1"]) == 2
    assert "--bound: must be a positive number of seconds" in capsys.readouterr().err
    with pytest.raises(ValueError, match="bound_s"):
        plan(_snap(), bound_s=-1.0)


def _feasible(rel: Relaxation, d: Decision) -> bool:
    """Is ``d`` (its hint: every variable) a solution of the relaxation?"""
    m = rel.m.clone()
    for var, val in rel.hint(d):
        m.add(m.get_int_var_from_proto_index(var.index) == val)
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.max_deterministic_time = 5.0
    return s.solve(m) in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def _within(items: list[tuple[str, float, float, str]]) -> bool:
    """Does no item pass its bound (admissions and priority at most it, costs and
    evictions at least it)?"""
    return all(val >= bnd if name in ("eviction cost", "evictions") else val <= bnd
               for name, val, bnd, _st in items)


# 16 of 200 such ticks (cases 100-299, with 4-12 nodes of 4 or 8 GPUs, 5-12 pending
# jobs, 70-95% occupied, gangs, pools), where every planner's plan was a solution,
# and the relaxation proved 184 of the whole model's plans optimal (196 of which the
# model proved itself)
@pytest.mark.parametrize("case", range(100, 116))
def test_every_valid_plan_is_a_solution_of_the_relaxation_and_no_bound_cuts_a_plan(
        case: int) -> None:
    r = random.Random(case)
    snap = random_tick(r, case)
    snap["policy"] = random_policy(r)
    problem = build_problem(load_snapshot(json.loads(json.dumps(snap))))
    rel = Relaxation(problem)
    for name in ("cpsat", "greedy", "k8s", "slurm"):
        p = plan(snap, planner=name, deterministic=True, time_limit_s=3.0)
        d = decision_of(problem, p)
        assert _feasible(rel, d), f"{name}'s plan is cut off"
        res = prove(problem, d, Budget(5.0, wall=False), deterministic=True)
        assert res.items and _within(res.items), res.items


def test_the_bound_proves_optimal_a_plan_the_whole_model_left_feasible() -> None:
    # 16 nodes, seed 1: the deterministic 1 s plan is feasible (3/26/0 GPUs, two
    # evictions; the whole model proves it at 2 s), and the relaxation's optimum is
    # that plan's on every item
    snap = generate(nodes=16, pending=20, seed=1, occupancy=0.9, multinode_share=0.15)
    snap["policy"].setdefault("thrash", {})["exempt_free_first"] = False
    p = plan(snap, deterministic=True, time_limit_s=1.0, bound_s=10.0)
    assert p.objective.admitted_gpus == {"1": 3, "2": 26, "3": 0}
    assert p.objective.evictions == 2
    assert p.status == "optimal" and p.solver.gap == 0.0
    assert p.solver.status != "OPTIMAL"  # (the whole model's own status stays)
