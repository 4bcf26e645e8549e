"""The relaxation bound (planner/solver/bound.py, ``plan(bound_s=...)``, ``plan --bound``).

Hand-worked: a tick whose plan the bound proves optimal, and an empty plan whose
gap it gives. Validity over random generated ticks and policies: every planner's
valid plan is a solution of the relaxation (so its optimum bounds every plan, the
whole model's proven optimum among them), and no bound falls below the plan.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
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
from planner.solver.bound import (
    BoundResult,
    Relaxation,
    item_values,
    prove,
    prove_tiers,
    tiers_apply,
    tighter,
)
from planner.solver.model import COST_SCALE

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


def _solves(rel: Relaxation, model: cp_model.CpModel, d: Decision) -> bool:
    """Is ``d`` (its hint: every variable) a solution of ``model`` (the relaxation's,
    or one of its cases)?"""
    m = model.clone()
    for var, val in rel.hint(d):
        m.add(m.get_int_var_from_proto_index(var.index) == val)
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.max_deterministic_time = 5.0
    return s.solve(m) in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def _feasible(rel: Relaxation, d: Decision) -> bool:
    """Is ``d`` a solution of the relaxation, and of one of the cases prove() solves?"""
    return _solves(rel, rel.m, d) and any(_solves(rel, c.model, d) for c in rel.cases())


def _within(items: list[tuple[str, float, float, str]]) -> bool:
    """Does no item pass its bound (admissions and priority at most it, costs and
    evictions at least it)?"""
    return all(val >= bnd if name in ("eviction cost", "evictions") else val <= bnd
               for name, val, bnd, _st in items)


def _random_tick(case: int) -> tuple[dict[str, Any], Any]:
    """Random tick ``case`` (tests/snapshot_parts.py) under a random policy, and its
    problem."""
    r = random.Random(case)
    snap = random_tick(r, case)
    snap["policy"] = random_policy(r)
    return snap, build_problem(load_snapshot(json.loads(json.dumps(snap))))


# 16 of 200 such ticks (cases 100-299, with 4-12 nodes of 4 or 8 GPUs, 5-12 pending
# jobs, 70-95% occupied, gangs, pools), where every planner's plan was a solution,
# and the relaxation proved 184 of the whole model's plans optimal (196 of which the
# model proved itself)
@pytest.mark.parametrize("case", range(100, 116))
def test_every_valid_plan_is_a_solution_of_the_relaxation_and_no_bound_cuts_a_plan(
        case: int) -> None:
    snap, problem = _random_tick(case)
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


def _budget_tick() -> dict[str, Any]:
    """n0 free; n1, n2 each held by a tier-3 8-GPU job (a1, a2); n3 by a tier-3 4-GPU
    job (a3) with 4 GPUs free; all 8 GPUs, every job 5 h old (a restore_s of 60 s:
    8-GPU victims cost 480 GPU-s, a3 240). R15 allows one eviction in the window for
    a job of a tier that is not exempt (min_evictions 1, max_fraction 0, no GPU
    limit); tier 1 is exempt while every victim's preemptors are tier 1. Pending: A
    (tier 1, 3 nodes x 8 GPUs, priority 10), B (tier 2, 8 GPUs), C (tier 2, 4 GPUs,
    priority 5).

    A needs three whole nodes. On n1-n3, through a1, a2 and a3, its victims are
    exempt and B takes n0's free GPUs: 24/8/0 GPUs, priority 3 x 8 x 10 = 240, cost
    480 + 480 + 240 = 1,200 GPU-s and 1,800 for each of the two victims past the
    window's one (thrash.past_budget_gpu_s): 4,800, three evictions, the optimum. A victim for a
    tier-2 job makes every victim count in the window, one at most: then the plan
    holds at most n0's and n3's 12 free GPUs and one victim's 8, 20 GPUs, fewer than
    A's 24 alone."""
    nodes = [{"id": f"n{i}", "gpus": 8, "gpu_type": "H100", "nvlink": "nvswitch"}
             for i in range(4)]

    def running(jid: str, gpus: int, node: str) -> dict:
        return {"id": jid, "tier": 3, "state": "running", "gpus_per_node": gpus,
                "started_at": "2026-11-30T03:00:00Z", "checkpoint": {"restore_s": 60},
                "placement": [{"node": node, "gpus": list(range(gpus))}]}

    jobs = [running("a1", 8, "n1"), running("a2", 8, "n2"), running("a3", 4, "n3"),
            {"id": "A", "tier": 1, "state": "pending", "gpus_per_node": 8, "nodes": 3,
             "priority": 10, "topology": "any"},
            {"id": "B", "tier": 2, "state": "pending", "gpus_per_node": 8, "topology": "any"},
            {"id": "C", "tier": 2, "state": "pending", "gpus_per_node": 4, "priority": 5,
             "topology": "any"}]
    policy = {"thrash": {"min_evictions": 1, "max_fraction": 0.0, "max_gpu_fraction": None,
                         "exempt_free_first": False}}
    return {"version": 1, "now": NOW, "storage": [], "nodes": nodes, "jobs": jobs,
            "policy": policy}


def _whole(node: int) -> tuple[int, int]:
    """All 8 GPUs of node ``node`` (a Decision's placement part)."""
    return node, 0xFF


def test_r15s_two_cases_each_hold_their_plans_and_the_budget_case_its_gpus() -> None:
    problem = build_problem(load_snapshot(_budget_tick()))
    rel = Relaxation(problem)
    budget, exempt = rel.cases()
    # with the window's budget binding every victim: n0's and n3's 12 free GPUs and
    # the one victim's at most 8
    assert (budget.within, budget.most, exempt.within, exempt.most) == (True, 20, False, None)
    budget_case, exempt_case = budget.model, exempt.model
    # A on n1-n3 through a1-a3, B on n0: victims for tier 1 only
    best = Decision(placements={"A": [_whole(1), _whole(2), _whole(3)], "B": [_whole(0)]},
                    victims={"a1", "a2", "a3"})
    assert _solves(rel, exempt_case, best) and not _solves(rel, budget_case, best)
    # B on n3 through a3, a victim for tier 2: one eviction, within the budget
    b_only = Decision(placements={"B": [_whole(3)]}, victims={"a3"})
    assert _solves(rel, budget_case, b_only) and not _solves(rel, exempt_case, b_only)


def test_the_bound_leaves_out_the_case_whose_gpus_fall_short_of_the_plan() -> None:
    problem = build_problem(load_snapshot(_budget_tick()))
    best = Decision(placements={"A": [_whole(1), _whole(2), _whole(3)], "B": [_whole(0)]},
                    victims={"a1", "a2", "a3"})
    res = prove(problem, best, Budget(5.0, wall=False), deterministic=True)
    # A is the only tier-1 job: its 24 GPUs need no solve ("ALL"); the budget case
    # holds at most 20 GPUs, fewer than A's 24: left out there, before its first solve
    # (one status per item after: the other case's), and the other case proves the
    # plan optimal on every item
    assert res.proven and res.gap == 0.0
    assert res.items == [
        ("tier-1 GPUs", 24.0, 24.0, "ALL"), ("tier-2 GPUs", 8.0, 8.0, "OPTIMAL"),
        ("priority value", 240.0, 240.0, "OPTIMAL"),
        ("eviction cost", 4800.0, 4800.0, "OPTIMAL"), ("evictions", 3.0, 3.0, "OPTIMAL")]
    # and the planner finds that plan
    p = plan(_budget_tick(), deterministic=True)
    assert p.objective.admitted_gpus == {"1": 24, "2": 8, "3": 0}
    assert sorted(e.job for e in p.evictions) == ["a1", "a2", "a3"]


def test_a_case_whose_ceiling_cannot_raise_the_bound_is_not_solved() -> None:
    # the empty plan: tier 1 0 GPUs. The case without a victim for tier 2 is solved
    # first (A's 24 GPUs through exempt victims); the budget case's 20 GPUs at most
    # cannot raise that bound: its ceiling stands for it (CEILING), unsolved
    problem = build_problem(load_snapshot(_budget_tick()))
    res = prove(problem, Decision(), Budget(5.0, wall=False), deterministic=True)
    assert res.items == [("tier-1 GPUs", 0.0, 24.0, "CEILING/OPTIMAL")]
    assert res.gap == 1.0 and not res.proven


def test_the_relaxation_is_the_same_model_for_the_same_tick() -> None:
    # its classes in a canonical order (not by the candidate lists' ids, which differ
    # from one problem to the next): the same tick built twice gives the same model,
    # so that deterministic mode repeats its bounds (R14)
    snap = generate(nodes=24, pending=30, seed=3, occupancy=0.9, multinode_share=0.15)
    one, two = (Relaxation(build_problem(load_snapshot(json.loads(json.dumps(snap)))))
                for _ in range(2))
    assert len(one.classes) > 5
    assert [str(c) for c in one.m.proto.constraints] == [
        str(c) for c in two.m.proto.constraints]


def test_what_the_detail_says_of_a_bound() -> None:
    # the time ran out after items the plan reaches: no gap, and nothing said of the
    # items after
    reached = BoundResult(items=[("tier-1 GPUs", 8.0, 8.0, "ALL"),
                                 ("tier-2 GPUs", 4.0, 4.0, "OPTIMAL")])
    assert reached.gap is None
    assert reached.describe() == (
        "bound from a relaxation solved with CP-SAT: the plan reaches the bound on "
        "tier-1 GPUs, tier-2 GPUs; nothing proven on the items after")
    # a cost above its bound is against "at least" the bound, admissions "at most"
    cost = BoundResult(items=[("tier-1 GPUs", 8.0, 8.0, "ALL"),
                              ("eviction cost", 600.0, 480.0, "OPTIMAL")], gap=0.2)
    assert cost.describe().endswith(
        "reaches the bound on tier-1 GPUs; eviction cost 600 against at least 480")
    short = BoundResult(items=[("tier-1 GPUs", 0.0, 8.0, "OPTIMAL")], gap=1.0)
    assert short.describe().endswith("the plan tier-1 GPUs 0 against at most 8")


def test_the_whole_models_phases_bound_each_item_of_any_plan() -> None:
    # the hand-worked tick of the first test: the whole model proves 8/4 GPUs (tier
    # 1, tier 2; no tier-3 job pending), priority 8 x 10 + 4 x 5 = 100, 480 GPU-s,
    # one eviction. Its phases' bounds measure any plan, item by item (CpsatModel.
    # gap_of): the plan itself reaches every one; the empty plan is 8 tier-1 GPUs
    # short; b alone on n1's free GPUs 8 tier-1 GPUs short too; a through r3 alone
    # reaches tier 1 and is 4 tier-2 GPUs short
    from planner.solver.model import CpsatModel, run_phases

    problem = build_problem(load_snapshot(_snap()))
    model = CpsatModel(problem)
    res = run_phases(model, Decision(), Budget(5.0, wall=False), deterministic=True,
                     workers=1, seed=0)
    assert res.best is not None and len(res.bounds) == len(res.phases)
    assert model.gap_of(res, res.best) == ("", 0.0, 0.0)
    assert model.gap_of(res, Decision()) == ("tier-1 GPUs", 0.0, 8.0)
    assert model.gap_of(res, Decision(set(), {"b": [(1, 0xF0)]})) == ("tier-1 GPUs", 0.0, 8.0)
    assert model.gap_of(res, Decision({"r3"}, {"a": [(0, 0xFF)]})) == ("tier-2 GPUs", 0.0, 4.0)
    # a and b through both victims: the admissions' bounds, and 720 GPU-s against 480
    both = Decision({"r3", "s3"}, {"a": [(1, 0xFF)], "b": [(0, 0x0F)]})
    assert model.gap_of(res, both) == ("eviction cost", 720.0, 480.0)


@pytest.mark.parametrize("case", range(100, 106))
def test_no_valid_plan_passes_the_bounds_the_whole_models_phases_prove(case: int) -> None:
    # what CpsatModel.gap_of measures a plan after thrash.exempt_free_first against:
    # every planner's plan, and CP-SAT's with the swap off (the contract objective's
    # own), is a plan the model holds, so none passes a bound (gap_of None); over
    # 59 such ticks (cases 100-159) none did
    from planner.solver.model import CpsatModel, run_phases

    snap, problem = _random_tick(case)
    model = CpsatModel(problem)
    res = run_phases(model, Decision(), Budget(5.0, wall=False), deterministic=True,
                     workers=1, seed=0)
    assert len(res.bounds) == len(res.phases)
    off = json.loads(json.dumps(snap))
    if off["policy"].get("thrash") is not None:
        off["policy"]["thrash"]["exempt_free_first"] = False
    for name, s in (("cpsat", snap), ("greedy", snap), ("k8s", snap), ("slurm", snap),
                    ("cpsat", off)):
        p = plan(s, planner=name, deterministic=True, time_limit_s=3.0)
        assert model.gap_of(res, decision_of(problem, p)) is not None, name


def test_plan_bound_keeps_the_more_telling_of_two_gaps() -> None:
    # the plan's gap from the whole model's phases after thrash.exempt_free_first (at
    # an item the planner names) gives way to the relaxation's at a later item, or at
    # the same one and smaller; not to one at an earlier item, nor where the plan's
    # item is not known
    from models import SolverInfo
    from planner import _telling

    sv = SolverInfo(engine="cp-sat", status="FEASIBLE/FEASIBLE", gap=0.45)
    sv.name_gap_item("tier-2 GPUs")
    same_closer = BoundResult(items=[("tier-1 GPUs", 98.0, 98.0, "ALL"),
                                     ("tier-2 GPUs", 107.0, 131.0, "OPTIMAL")], gap=0.183)
    later = BoundResult(items=[("tier-1 GPUs", 98.0, 98.0, "ALL"),
                               ("tier-2 GPUs", 107.0, 107.0, "OPTIMAL"),
                               ("tier-3 GPUs", 13.0, 40.0, "OPTIMAL")], gap=0.675)
    earlier = BoundResult(items=[("tier-1 GPUs", 98.0, 99.0, "OPTIMAL")], gap=0.0101)
    assert _telling(same_closer, sv) and _telling(later, sv)
    assert not _telling(earlier, sv)
    sv.name_gap_item(None)  # (the last phase's gap of an untraded plan: its item not named)
    assert not _telling(same_closer, sv)
    # the items' order holds for any tier a policy names, then priority, cost, evictions
    from planner.solver.bound import item_rank

    names = ["tier-1 GPUs", "tier-2 GPUs", "tier-4 GPUs", "priority value", "eviction cost",
             "evictions"]
    assert sorted(names, key=item_rank) == names and item_rank("cost") is None
    # end to end on the bundled generated tick: the model's phases bound tier 2 at
    # 195, the relaxation at 131; the plan (107) reports the relaxation's gap
    tick = Path(__file__).resolve().parent.parent / "instances" / "gen-medium.json"
    p = plan(str(tick), deterministic=True, time_limit_s=2.0, bound_s=5.0)
    assert p.objective.admitted_gpus["2"] == 107
    assert p.solver.gap == round((131 - 107) / 131, 6)


@pytest.mark.parametrize("case", range(100, 108))
def test_a_plans_item_values_are_what_the_relaxation_counts_for_it(case: int) -> None:
    # item_values (how a plan made elsewhere is judged against a bound) counts each
    # item as the relaxation's image of the plan (Relaxation.hint) does: every
    # planner's plan on random ticks and policies
    snap, problem = _random_tick(case)
    rel = Relaxation(problem)
    for name in ("cpsat", "greedy", "k8s", "slurm"):
        d = decision_of(problem, plan(snap, planner=name, deterministic=True,
                                      time_limit_s=3.0))
        given = {var.index: val for var, val in rel.hint(d)}
        values = item_values(problem, d)
        for item, vs, cs, _sense in rel.items:
            scale = COST_SCALE if item == "eviction cost" else 1
            counted = sum(c * given[v.index] for v, c in zip(vs, cs, strict=True)) / scale
            assert values[item] == counted, (name, item)


def test_a_bound_judges_another_plan_at_the_first_item_where_it_differs() -> None:
    # The hand-worked tick (_snap): its optimum is 8/4 GPUs, priority 100, 480 GPU-s,
    # one eviction. Proved for the plan "a through r3" (8/0 GPUs): tier 1 is reached
    # without a solve (every tier-1 job placed), tier 2 is at most 4: the proof
    # stops there
    problem = build_problem(load_snapshot(_snap()))
    a_only = Decision({"r3"}, {"a": [_whole(0)]})
    res = prove(problem, a_only, Budget(5.0, wall=False), deterministic=True)
    assert res.items == [("tier-1 GPUs", 8.0, 8.0, "ALL"), ("tier-2 GPUs", 0.0, 4.0, "OPTIMAL")]
    # b alone on n1's free GPUs: 0 tier-1 GPUs against 8
    b_only = Decision(set(), {"b": [(1, 0xF0)]})
    judged = res.judge(item_values(problem, b_only))
    assert judged.items == [("tier-1 GPUs", 0.0, 8.0, "ALL")] and judged.gap == 1.0
    # the optimum reaches tier 2's bound too, the last item proved: no gap, nothing
    # known after
    best = Decision({"r3"}, {"a": [_whole(0)], "b": [(1, 0xF0)]})
    judged = res.judge(item_values(problem, best))
    assert judged.gap is None and not judged.proven
    assert judged.describe().endswith("reaches the bound on tier-1 GPUs, tier-2 GPUs; "
                                      "nothing proven on the items after")
    # proved for the optimum, every item is bounded: the optimum is proven; a plan
    # with the same admissions through both victims (a on n1, b on n0) costs 720
    # GPU-s against at least 480: (720 - 480) / 720
    full = prove(problem, best, Budget(5.0, wall=False), deterministic=True)
    assert full.proven
    same = full.judge(item_values(problem, best))
    assert same.proven and same.gap == 0.0 and same.cost_bound == 480.0
    both = Decision({"r3", "s3"}, {"a": [_whole(1)], "b": [(0, 0x0F)]})
    judged = full.judge(item_values(problem, both))
    assert [(n, v, b) for n, v, b, _st in judged.items] == [
        ("tier-1 GPUs", 8.0, 8.0), ("tier-2 GPUs", 4.0, 4.0), ("priority value", 100.0, 100.0),
        ("eviction cost", 720.0, 480.0)]
    assert judged.gap == pytest.approx(1 / 3) and judged.cost_bound == 480.0
    # through=True goes on past the item the plan it was given misses, holding it at
    # its bound: proved for "a through r3", the optimum is then proven on every item
    through = prove(problem, a_only, Budget(5.0, wall=False), deterministic=True,
                    through=True)
    assert [(n, v, b) for n, v, b, _st in through.items] == [
        ("tier-1 GPUs", 8.0, 8.0), ("tier-2 GPUs", 0.0, 4.0), ("priority value", 80.0, 100.0),
        ("eviction cost", 480.0, 480.0), ("evictions", 1.0, 1.0)]
    assert through.gap == 1.0 and through.complete and not through.proven
    judged = through.judge(item_values(problem, best))
    assert judged.proven and judged.gap == 0.0
    # a value past its bound (a bound that does not hold for the plan) gives no bound
    assert full.judge({**item_values(problem, best), "tier-2 GPUs": 5.0}).items == []


def test_the_tier_bound_leaves_the_exempt_tiers_jobs_out_of_the_case_without_the_window(
        ) -> None:
    # _budget_tick's optimum (A through a1-a3, B on n0): tier 1 is reached without a
    # solve. Tier 2: the window's case holds at most 20 GPUs, fewer than A's 24 alone:
    # left out. In the other case B and C take free GPUs only, and A, left out of the
    # cheap relaxation, takes none of them: B on n0's 8 and C on n3's 4, 12 GPUs (the
    # whole relaxation, where A needs n3, proves 8: prove_tiers is looser)
    problem = build_problem(load_snapshot(_budget_tick()))
    best = Decision(placements={"A": [_whole(1), _whole(2), _whole(3)], "B": [_whole(0)]},
                    victims={"a1", "a2", "a3"})
    res = prove_tiers(problem, best, Budget(5.0, wall=False), deterministic=True)
    assert res.items == [("tier-1 GPUs", 24.0, 24.0, "ALL"), ("tier-2 GPUs", 8.0, 12.0, "OPTIMAL")]
    assert res.gap == pytest.approx(1 / 3) and not res.proven and not res.complete
    # the empty plan: tier 1 is the exempt tier's own model, A's jobs alone on free
    # GPUs and every victim's: three whole nodes of four hold its 24 GPUs (the
    # window's case holds at most 20): 0 against 24
    empty = prove_tiers(problem, Decision(), Budget(5.0, wall=False), deterministic=True)
    assert empty.items == [("tier-1 GPUs", 0.0, 24.0, "CEILING/OPTIMAL")]
    assert empty.gap == 1.0


def test_the_tier_bound_through_bounds_a_plan_that_reaches_more(
        ) -> None:
    # The empty plan of _budget_tick falls short at tier 1 (0 against 24, the
    # previous test). With through=True the bound goes on to tier 2 with tier 1 held
    # at its bound, 24: as for the optimum there, the window's case (20 GPUs at
    # most) cannot hold that and is left out, and B and C take at most 12 GPUs of the
    # free case. Judged for that optimum (24 tier-1 GPUs, then B's 8), the bound is
    # the one proved for it: tier 1 reached, tier-2 8 against 12, a gap of 1/3
    problem = build_problem(load_snapshot(_budget_tick()))
    res = prove_tiers(problem, Decision(), Budget(5.0, wall=False), deterministic=True,
                      through=True)
    assert res.items == [("tier-1 GPUs", 0.0, 24.0, "CEILING/OPTIMAL"),
                         ("tier-2 GPUs", 0.0, 12.0, "OPTIMAL")]
    assert res.gap == 1.0
    best = Decision(placements={"A": [_whole(1), _whole(2), _whole(3)], "B": [_whole(0)]},
                    victims={"a1", "a2", "a3"})
    judged = res.judge(item_values(problem, best))
    assert judged.items == [("tier-1 GPUs", 24.0, 24.0, "CEILING/OPTIMAL"),
                            ("tier-2 GPUs", 8.0, 12.0, "OPTIMAL")]
    assert judged.gap == pytest.approx(1 / 3)
    # without through the empty plan's bound stops at tier 1: the optimum reaches it,
    # and nothing is said of tier 2
    alone = prove_tiers(problem, Decision(), Budget(5.0, wall=False), deterministic=True)
    assert alone.judge(item_values(problem, best)).gap is None


def test_the_cheap_relaxation_groups_the_nodes_alike_in_every_row() -> None:
    # _budget_tick. In the exempt tier's own model (A's shards take free GPUs and
    # those of the tier-3 jobs it may evict), n1 and n2, each held whole by an 8-GPU
    # tier-3 job, are alike: one group, n1 standing for both with at most 2 of A's
    # 8-GPU shards; n0 (free) and n3 (4 GPUs free, 4 of a3's) are alone, 1 shard each.
    # In the free case of tier 2 (no victims) n1 and n2 are alike again (no room),
    # and hold no shard. The bounds are those worked out per node (the tests above:
    # 24 tier-1 GPUs for the empty plan, 12 tier-2 GPUs for the optimum)
    problem = build_problem(load_snapshot(_budget_tick()))
    own = Relaxation(problem, cheap=frozenset({1}), victims=True)
    assert own.group.tolist() == [0, 1, 1, 3] and own.count == {0: 1, 1: 2, 3: 1}
    a = next(iter(own.classes))[0]
    assert {ni: hi for (ni, kind), hi in own.hi.items() if kind == a} == {0: 1, 1: 2, 3: 1}
    free = Relaxation(problem, cheap=frozenset({2}))
    assert free.group.tolist() == [0, 1, 1, 3]
    assert {ni for ni, _kind in free.hi} == {0, 3}
    assert all(firsts == [0, 1, 3] for firsts in free.firsts.values())


def test_a_tier_whose_case_without_the_window_gets_no_bound_in_time_has_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the empty plan of _budget_tick: the window's case holds at most 20 tier-1 GPUs,
    # the case without it 24. Where the solve of the second stops before any bound
    # (UNKNOWN), the window's 20 alone is no bound (the other case may be above it):
    # none; where that case has no plan (INFEASIBLE), the window's 20 is the bound
    from planner.solver import bound as bound_mod
    problem = build_problem(load_snapshot(_budget_tick()))
    monkeypatch.setattr(bound_mod, "_most", lambda *a, **k: (None, "UNKNOWN"))
    assert prove_tiers(problem, Decision(), Budget(5.0, wall=False),
                       deterministic=True).items == []
    monkeypatch.setattr(bound_mod, "_most", lambda *a, **k: (None, "INFEASIBLE"))
    assert prove_tiers(problem, Decision(), Budget(5.0, wall=False),
                       deterministic=True).items == [("tier-1 GPUs", 0.0, 20.0, "CEILING")]


def test_the_tier_bound_takes_a_bound_from_the_packing(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    # a bound of every plan on tier 1 from elsewhere (the packing of its gangs,
    # planner/solver/packing.py). Say it proves that no plan admits A (0 GPUs): the
    # empty plan reaches it, no case is solved for tier 1 (the exempt tier's own model
    # is never built), and tier 2 is bounded as with A out: B and C take at most 12
    # GPUs, B's 8 alone a gap of 1/3. Where the bound from elsewhere is lower than the
    # cases' (16 against 24), it is the bound; the window's case alone reaching it
    # (20 GPUs), the exempt tier's model is not built then either
    from planner.solver import bound as bound_mod
    problem = build_problem(load_snapshot(_budget_tick()))
    problem.packed_bound = {"tier-1 GPUs": 0.0}
    real = bound_mod.Relaxation

    def no_exempt_model(p: Any, **kw: Any) -> Any:
        assert kw.get("cheap") != frozenset({1}), "the exempt tier's model was built"
        return real(p, **kw)

    monkeypatch.setattr(bound_mod, "Relaxation", no_exempt_model)
    res = prove_tiers(problem, Decision(placements={"B": [_whole(0)]}),
                      Budget(5.0, wall=False), deterministic=True)
    assert res.items == [("tier-1 GPUs", 0.0, 0.0, "PACKED"),
                         ("tier-2 GPUs", 8.0, 12.0, "CEILING/OPTIMAL")]
    assert res.gap == pytest.approx(1 / 3)
    problem.packed_bound = {"tier-1 GPUs": 16.0}
    res = prove_tiers(problem, Decision(), Budget(5.0, wall=False), deterministic=True)
    assert res.items == [("tier-1 GPUs", 0.0, 16.0, "PACKED")] and res.gap == 1.0


def test_the_tier_bound_takes_the_windows_ceiling_where_it_is_higher() -> None:
    # _budget_tick without A and with D (tier 2, 8 GPUs): tier-2 jobs B, C, D, 20 GPUs.
    # The window's case: n0's and n3's 12 free GPUs and one victim's 8, 20, above the
    # free case's 12 (B or D on n0, C on n3). B on n0 and C on n3 admit 12 against at
    # most 20, a gap of 8 / 20; with D through a1 (one eviction, the window's one) the
    # plan admits all 20: reached without a solve, nothing proven after
    snap = _budget_tick()
    snap["jobs"] = [j for j in snap["jobs"] if j["id"] != "A"] + [
        {"id": "D", "tier": 2, "state": "pending", "gpus_per_node": 8, "topology": "any"}]
    problem = build_problem(load_snapshot(snap))
    some = Decision(placements={"B": [_whole(0)], "C": [(3, 0xF0)]})
    res = prove_tiers(problem, some, Budget(5.0, wall=False), deterministic=True)
    assert res.items == [("tier-2 GPUs", 12.0, 20.0, "CEILING/OPTIMAL")]
    assert res.gap == pytest.approx(0.4)
    every = Decision(placements={"B": [_whole(0)], "C": [(3, 0xF0)], "D": [_whole(1)]},
                     victims={"a1"})
    res = prove_tiers(problem, every, Budget(5.0, wall=False), deterministic=True)
    assert res.items == [("tier-2 GPUs", 20.0, 20.0, "ALL")] and res.gap is None
    assert res.describe().endswith("reaches the bound on tier-2 GPUs; nothing proven on the "
                                   "items after")
    # without exempt tiers, or with exempt_if any, it does not apply
    for thrash in ({"exempt_tiers": []}, {"exempt_if": "any"}):
        snap["policy"]["thrash"].update(thrash)
        other = build_problem(load_snapshot(snap))
        assert prove_tiers(other, some, Budget(5.0, wall=False), deterministic=True).items == []
        snap["policy"]["thrash"].pop(next(iter(thrash)))


_SOUND = {"OPTIMAL", "ALL", "CEILING", "NONE"}  # statuses of a relaxation's own optimum


@pytest.mark.parametrize("case", range(100, 112))
def test_the_tier_bound_is_no_tighter_than_the_relaxations_and_holds_every_plan(
        case: int) -> None:
    # random ticks and policies, R15 under exempt_if all with tier 1 exempt: for each
    # planner's plan, prove_tiers' bound on each tier item is at least the whole
    # relaxation's optimum there (its cases are relaxations of the relaxation's), and
    # judged for every other planner's plan it holds (no value past a bound)
    snap, _problem = _random_tick(case)
    snap["policy"]["thrash"] = {**(snap["policy"].get("thrash") or {}),
                                "exempt_if": "all", "exempt_tiers": [1]}
    problem = build_problem(load_snapshot(snap))
    assert tiers_apply(problem)
    plans = [decision_of(problem, plan(snap, planner=name, deterministic=True,
                                       time_limit_s=3.0))
             for name in ("cpsat", "greedy", "k8s", "slurm")]
    for d in plans:
        cheap = prove_tiers(problem, d, Budget(5.0, wall=False), deterministic=True)
        full = prove(problem, d, Budget(5.0, wall=False), deterministic=True)
        for (n1, v1, b1, _s1), (n2, v2, b2, s2) in zip(cheap.items, full.items, strict=False):
            assert (n1, v1) == (n2, v2)
            if set(s2.split("/")) <= _SOUND:
                assert b1 >= b2, (n1, b1, b2)
        # through=True: the same items up to the first gap, and every plan within
        # the bounds as judged
        thru = prove_tiers(problem, d, Budget(5.0, wall=False), deterministic=True,
                           through=True)
        assert thru.items[:len(cheap.items)] == cheap.items
        for other in plans:
            judged = cheap.judge(item_values(problem, other))
            assert bool(judged.items) == bool(cheap.items) and _within(judged.items)
            judged = thru.judge(item_values(problem, other))
            assert bool(judged.items) == bool(thru.items) and _within(judged.items)


def test_the_tighter_of_the_relaxations_bound_and_the_tier_items() -> None:
    t1, t3 = ("tier-1 GPUs", 8.0, 8.0, "ALL"), ("tier-3 GPUs", 0.0, 2.0, "OPTIMAL")
    # the relaxation stopped by its time limit at tier 2 (at most 40, FEASIBLE), the
    # tier items' bound 20 there: 20, and what the relaxation bounded after it,
    # holding tier 2 at 40, dropped
    full = BoundResult(items=[t1, ("tier-2 GPUs", 12.0, 40.0, "FEASIBLE"), t3], gap=0.7,
                       complete=False, seconds=1.5)
    cheap = BoundResult(items=[t1, ("tier-2 GPUs", 12.0, 20.0, "OPTIMAL")], gap=0.4,
                        seconds=0.2)
    out = tighter(full, cheap)
    assert out.items == [t1, ("tier-2 GPUs", 12.0, 20.0, "OPTIMAL")]
    assert out.gap == pytest.approx(0.4) and not out.complete and not out.proven
    assert out.seconds == pytest.approx(1.7)
    # the relaxation tighter (16): its items, all of them, complete as it is
    full = BoundResult(items=[t1, ("tier-2 GPUs", 12.0, 16.0, "OPTIMAL"), t3,
                              ("priority value", 5.0, 9.0, "OPTIMAL"),
                              ("eviction cost", 480.0, 240.0, "OPTIMAL"),
                              ("evictions", 2.0, 1.0, "OPTIMAL")],
                       gap=0.25, complete=True)
    out = tighter(full, cheap)
    assert out.items == full.items and out.complete and not out.proven
    assert out.gap == pytest.approx(0.25) and out.cost_bound == 240.0
    # the relaxation stopped before tier 2: the tier items' bound there
    full = BoundResult(items=[t1], complete=False)
    out = tighter(full, cheap)
    assert out.items == cheap.items and out.gap == pytest.approx(0.4) and not out.complete
    # a plan at every bound of a complete relaxation: proven, whatever the tiers say
    best = [("tier-1 GPUs", 8.0, 8.0, "ALL"), ("eviction cost", 0.0, 0.0, "NONE")]
    out = tighter(BoundResult(items=best, gap=0.0, proven=True, complete=True),
                  BoundResult(items=best[:1]))
    assert out.proven and out.gap == 0.0 and out.complete
