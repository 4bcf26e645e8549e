"""The time budget every phase of solve_cpsat takes its time from, and the costs
measured at run time (planner/core/budget.py, planner/solver/portfolio.py)."""

from __future__ import annotations

import time

import pytest

from planner.core.budget import Budget
from planner.solver.portfolio import (
    BUILD_PAIR_S,
    EXACT_PAIRS,
    SOLVE_TIMES_EXACT,
    SOLVE_TIMES_PRUNED,
    Pace,
    Rates,
)


def test_a_budget_counts_from_its_start_and_its_parts_never_end_after_it() -> None:
    b = Budget(10.0, start=100.0)
    assert b.end == 110.0 and b.deadline == 110.0
    assert b.less(2.0).end == 108.0 and b.less(2.0).seconds == 8.0
    assert b.until(105.0).end == 105.0
    assert b.until(120.0).end == 110.0  # never after the budget it came from
    now = time.perf_counter()
    live = Budget(1.0)
    assert live.slice(10.0).end == live.end  # at most what is left
    assert now <= live.slice(0.1).end - 0.1 <= time.perf_counter()
    half = live.share(0.5)
    assert live.start < half.end < live.end
    assert not live.expired() and live.fits(0.1) and not live.fits(2.0)
    assert 0.0 < live.left() <= 1.0
    past = Budget(1.0, start=now - 5.0)
    assert past.expired() and past.left() < 0 and not past.fits(0.0)


def test_a_deterministic_budget_has_no_deadline() -> None:
    # R14: nothing in deterministic mode looks at the clock. The budget never
    # expires, every time fits, its parts are itself, and its length is what
    # CP-SAT gets as a deterministic time limit.
    b = Budget(2.0, wall=False, start=0.0)
    assert b.deadline is None and not b.expired() and b.fits(1e9)
    assert b.left() == 2.0
    assert b.less(1.5) is b and b.until(0.0) is b and b.share(0.1) is b


def test_the_whole_models_costs_follow_the_build_time_measured() -> None:
    # Before any build the rate is the prior (BUILD_PAIR_S times the speed factor, 1
    # in the tests): the estimates are those of the benchmark machine. A build of 40,000 pairs in 0.49 s (12 us per pair
    # after the 10 ms fixed part) moves the rate halfway to it; the least solve
    # worth it and the reserve's per-pair part follow (speed 1.5).
    r = Rates()
    assert r.build_s(40_000) == pytest.approx(BUILD_PAIR_S * 40_000 + 0.01)
    assert r.full_solve_s(40_000) == pytest.approx(9e-5 * 40_000)
    assert r.full_solve_s(10 * EXACT_PAIRS) == pytest.approx(4e-5 * EXACT_PAIRS)
    r.measured_build(40_000, 0.49)
    assert r.build_pair_s == pytest.approx(9e-6) and r.speed == pytest.approx(1.5)
    assert r.full_solve_s(40_000) == pytest.approx(SOLVE_TIMES_EXACT * 9e-6 * 40_000)
    assert r.full_solve_s(10 * EXACT_PAIRS) == pytest.approx(
        SOLVE_TIMES_PRUNED * 9e-6 * EXACT_PAIRS)
    # small builds are not measured (their fixed costs dominate), and one very slow
    # build counts as at most 4 times the prior
    r.measured_build(500, 5.0)
    assert r.build_pair_s == pytest.approx(9e-6)
    r.measured_build(20_000, 1e3)
    assert r.build_pair_s == pytest.approx((9e-6 + 4 * BUILD_PAIR_S) / 2)


def test_the_model_estimate_is_at_least_twice_a_greedy_run() -> None:
    # A greedy run measured at 0.2 s: the build is estimated at 0.41 s, more than the
    # per-pair estimate of a small model; the least solve is the build itself, or
    # nothing but the build where LNS has no rounds to run
    pace = Pace(1_000, greedy_s=0.2, rates=Rates(), lns_rounds=False)
    assert pace.model_s() == pytest.approx(0.82)
    pace.lns_rounds = True
    assert pace.model_s() == pytest.approx(
        0.41 + max(0.41, SOLVE_TIMES_EXACT * BUILD_PAIR_S * 1_000))
    assert pace.model_s(measured=False) == pytest.approx(
        BUILD_PAIR_S * 1_000 + 0.01 + max(BUILD_PAIR_S * 1_000 + 0.01, 0.1,
                                          SOLVE_TIMES_EXACT * BUILD_PAIR_S * 1_000))


def test_a_big_clusters_build_is_estimated_by_its_nodes_too() -> None:
    # A pruned model keeps EXACT_PAIRS pairs' worth of candidates (0.37 s at the
    # prior rate), but its build grows with the cluster: at least BUILD_NODE_S (0.6
    # ms) per usable node, 2.4 s at 4,000 nodes (1.73 s measured at 4,096 nodes at a
    # speed factor of 0.7); at 500 nodes the pairs' estimate stands
    from planner.solver.portfolio import BUILD_NODE_S

    big = Pace(3_000_000, rates=Rates(), usable=4_000)
    assert big.build_s(measured=False) == pytest.approx(BUILD_NODE_S * 4_000) == 2.4
    small = Pace(3_000_000, rates=Rates(), usable=500)
    assert small.build_s(measured=False) == pytest.approx(BUILD_PAIR_S * EXACT_PAIRS + 0.01)


def test_the_passes_stop_at_their_budgets_end() -> None:
    # Every pass takes its time from a Budget: one already over does nothing (not
    # even the set-up), and a deterministic one never ends (the passes there count
    # tries, R14).
    from models import load_snapshot
    from planner.core.decision import clean
    from planner.core.problem import build_problem
    from planner.heuristics.eject import eject, upgrade
    from planner.heuristics.greedy import GreedyPlanner
    from planner.heuristics.repack import cheaper_victims, polish, relocate, repack
    from planner.sim.generate import generate
    from planner.solver.lns import improve

    problem = build_problem(load_snapshot(generate(nodes=32, pending=12, seed=3)))
    d = clean(problem, GreedyPlanner(problem, spare_lower=True).solve())
    over = Budget(-1.0)
    assert polish(problem, d, over) == (d, "") and cheaper_victims(problem, d, over) == (d, "")
    assert repack(problem, d, over) == (d, 0) and relocate(problem, d, over)[1] == 0
    assert eject(problem, d, over) == (d, 0) and upgrade(problem, d, over) == (d, 0)
    assert GreedyPlanner(problem).cheaper_placements(d, over)[1] == 0
    res = improve(problem, d, over)
    assert res.decision is d and res.rounds == 0
    endless = Budget(0.0, wall=False)
    assert polish(problem, d, endless) == polish(problem, d)


def test_a_plan_that_places_every_job_on_free_gpus_ends_the_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # two free 8-GPU nodes, a running tier-3 job on a third; pending: 8, 4 and 4 GPUs
    # (tiers 1, 2, 3). The whole model is made out of reach (as on a big cluster). The
    # first greedy plan spares the free GPUs b and c need: a evicts r. The plain
    # greedy plan puts a on n0, b and c on n1: no plan admits more, costs less or
    # evicts fewer, so nothing else runs (the whole model would fail the test, LNS
    # would run for seconds) and the plan is optimal with gap 0
    from planner import plan
    from planner.solver import portfolio

    def no_model(*_a: object, **_k: object) -> None:
        raise AssertionError("the whole model was built")

    monkeypatch.setattr(portfolio, "CpsatModel", no_model)
    monkeypatch.setattr(portfolio.Pace, "model_s", lambda self, measured=True: 100.0)
    nodes = [{"id": f"n{i}", "gpus": 8} for i in range(3)]
    jobs = [{"id": "r", "tier": 3, "state": "running", "gpus_per_node": 8,
             "started_at": "2026-11-30T00:00:00Z",
             "placement": [{"node": "n2", "gpus": list(range(8))}]},
            *({"id": jid, "tier": t, "state": "pending", "gpus_per_node": g,
               "topology": "any"} for jid, t, g in (("a", 1, 8), ("b", 2, 4), ("c", 3, 4)))]
    snap = {"version": 1, "now": "2026-11-30T08:00:00Z", "storage": [], "nodes": nodes,
            "jobs": jobs, "policy": {}}
    p = plan(snap, time_limit_s=5.0)
    assert p.objective.admitted_gpus == {"1": 8, "2": 4, "3": 4}
    assert p.evictions == [] and not p.deferred
    assert (p.status, p.solver.status, p.solver.gap, p.solver.bound) == (
        "optimal", "OPTIMAL", 0.0, 0.0)
    assert p.solver.detail == (
        "the plain greedy plan (the greedy baseline's) returned; it places every pending "
        "job that may start on free GPUs: optimal, nothing to improve")
    assert p.solver.wall_s < 5.0  # (it did not wait for its limit: LNS never ran)
