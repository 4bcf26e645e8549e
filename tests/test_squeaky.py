"""The squeaky-wheel pass (planner.heuristics.greedy.squeaky_wheel): the greedy plan once
more, with the jobs the first pass deferred placed first within their tier.

Conventions as in test_repack.py: 8-GPU NVSwitch nodes, Monday 2026-11-30 08:00Z,
default policy.
"""

from __future__ import annotations

from typing import Any

import pytest

from models import SolverInfo, load_snapshot
from planner import plan
from planner.checks.assemble import assemble
from planner.checks.verify import verify
from planner.core.decision import clean, objective_of
from planner.core.problem import build_problem
from planner.heuristics.greedy import GreedyPlanner, squeaky_wheel

NOW = "2026-11-30T08:00:00Z"


def _snap(jobs: list[dict]) -> dict[str, Any]:
    nodes = [{"id": "h100", "gpus": 8, "gpu_type": "H100", "nvlink": "nvswitch"},
             {"id": "h200", "gpus": 8, "gpu_type": "H200", "nvlink": "nvswitch"}]
    return {"version": 1, "now": NOW, "storage": [], "nodes": nodes, "jobs": jobs,
            "policy": {}}


def _job(jid: str, gpus: int, tier: int = 2, priority: int = 10, **extra: Any) -> dict:
    return {"id": jid, "tier": tier, "state": "pending", "gpus_per_node": gpus,
            "priority": priority, "topology": "any", **extra}


def _plans(snap: dict[str, Any]) -> tuple[Any, Any, Any]:
    s = load_snapshot(snap)
    problem = build_problem(s)
    first = clean(problem, GreedyPlanner(problem, spare_lower=True).solve())
    second = squeaky_wheel(problem, first, spare_lower=True)
    for d in (first, second):
        p = assemble(problem, d, "feasible", SolverInfo(engine="test", status="TEST"))
        assert verify(s, p) == []
    return problem, first, second


def test_the_picky_job_the_first_pass_deferred_goes_first() -> None:
    # Two empty nodes, H100 and H200. Largest first, the 8-GPU job `big` (any type)
    # takes the first of two equally good nodes, h100; `picky` (7 GPUs, H100 only)
    # then fits nowhere: 8 GPUs admitted. The second pass places `picky` first, on
    # h100, and `big` on h200: 15 GPUs, priority value 10 x 15 = 150.
    problem, first, second = _plans(_snap([_job("big", 8), _job("picky", 7, gpu_type="H100")]))
    assert first.placements == {"big": [(0, 0xFF)]}
    assert objective_of(problem, first).admitted_gpus == {"1": 0, "2": 8, "3": 0}
    assert sorted(second.placements) == ["big", "picky"]
    assert second.placements["big"] == [(1, 0xFF)]
    assert second.placements["picky"][0][0] == 0
    o = objective_of(problem, second)
    assert o.admitted_gpus == {"1": 0, "2": 15, "3": 0}
    assert o.priority_value == 150


def test_tiers_keep_their_order_in_the_second_pass() -> None:
    # A tier-1 job `t1` (8 GPUs, any type) instead of `big`. Tier 1 goes first and
    # takes h100 (the first of two equally good nodes); `picky` (tier 2, H100 only)
    # is deferred. The second pass puts `picky` first only among tier-2 jobs, so t1
    # still goes first, takes h100 again, and `picky` stays deferred: 8 tier-1 GPUs
    # and none for tier 2 in both passes (the CP-SAT model would move t1 to h200).
    snap = _snap([_job("t1", 8, tier=1), _job("picky", 7, gpu_type="H100")])
    problem, first, second = _plans(snap)
    assert first.placements == second.placements == {"t1": [(0, 0xFF)]}
    assert objective_of(problem, second).admitted_gpus == {"1": 8, "2": 0, "3": 0}
    p = plan(snap, deterministic=True)
    assert p.status == "optimal"
    assert {x.job: x.placement[0].node for x in p.placements} == {"t1": "h200",
                                                                   "picky": "h100"}


def test_priority_order_takes_more_important_jobs_first_within_a_tier() -> None:
    # The order of the priority-first greedy variant (planner.solver.portfolio.PRIORITY_FIRST):
    # tiers still go in turn; inside a tier, higher priority first, then larger
    # jobs, then id. Tier 1: a (8 GPUs, priority 1), b (2 GPUs, 5), d (4 GPUs, 5);
    # tier 2: c (8 GPUs, 9). Size order: a, d, b, c. Priority order: d, b, a, c.
    from planner.heuristics.greedy import job_order

    snap = _snap([_job("a", 8, tier=1, priority=1), _job("b", 2, tier=1, priority=5),
                  _job("c", 8, tier=2, priority=9), _job("d", 4, tier=1, priority=5)])
    problem = build_problem(load_snapshot(snap))
    assert [i.job.id for i in job_order(problem)] == ["a", "d", "b", "c"]
    assert [i.job.id for i in job_order(problem, "priority")] == ["d", "b", "a", "c"]
    assert [i.job.id for i in GreedyPlanner(problem, order="priority").queue()] == \
        ["d", "b", "a", "c"]
    with pytest.raises(ValueError, match="order must be 'size' or 'priority'"):
        GreedyPlanner(problem, order="fifo")
