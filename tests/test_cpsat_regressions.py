"""Regressions of the CP-SAT model, named after the bug."""

from __future__ import annotations

from planner import plan
from planner.generate import generate
from planner.verify import verify


def test_phase_weights_do_not_overflow_model_invalid() -> None:
    # Weighted phases spanning up to 2**60 made CP-SAT reject the model as a
    # possible integer overflow (MODEL_INVALID) on this generated snapshot, and
    # phase values read back as doubles lost precision above 2**53.
    data = generate(nodes=64, pending=20, seed=0)
    p = plan(data, time_limit_s=5.0, deterministic=True)
    assert p.solver.engine == "cp-sat"
    assert "MODEL_INVALID" not in p.solver.status
    assert p.status in ("optimal", "feasible")
    from models import load_snapshot

    assert verify(load_snapshot(data), p) == []


def test_spare_lower_greedy_leaves_tier3_victims_to_pending_tier2() -> None:
    # One tier-1 8-GPU job and one tier-2 8-GPU job are pending. Node a holds a
    # tier-2 job (cost 8 x 100 = 800 GPU-s), node b a tier-3 job (8 x 10 = 80).
    # Plain greedy lets tier 1 take the cheap tier-3 node b; tier 2 (which may only
    # evict tier 3) then finds nothing. Sparing b for tier 2 admits both:
    # tier 1 evicts the tier-2 job on a (800), tier 2 evicts the tier-3 job on b (80).
    from models import load_snapshot
    from planner.assemble import clean, objective_of
    from planner.greedy import GreedyPlanner
    from planner.problem import build_problem

    def job(jid: str, tier: int, node: str | None, restore: float) -> dict:
        j = {"id": jid, "tier": tier, "gpus_per_node": 8,
             "checkpoint": {"restore_s": restore}}
        if node is None:
            return {**j, "state": "pending"}
        return {**j, "state": "running", "started_at": "2026-11-29T00:00:00Z",
                "placement": [{"node": node, "gpus": list(range(8))}]}

    data = {"version": 1, "now": "2026-11-29T08:00:00Z",
            "nodes": [{"id": "a", "gpus": 8}, {"id": "b", "gpus": 8}],
            "jobs": [job("run-t2", 2, "a", 100), job("run-t3", 3, "b", 10),
                     job("new-t1", 1, None, 0), job("new-t2", 2, None, 0)]}
    pr = build_problem(load_snapshot(data))
    plain = objective_of(pr, clean(pr, GreedyPlanner(pr).solve()))
    spare = objective_of(pr, clean(pr, GreedyPlanner(pr, spare_lower=True).solve()))
    assert plain.admitted_gpus == {"1": 8, "2": 0, "3": 0}
    assert spare.admitted_gpus == {"1": 8, "2": 8, "3": 0}
    assert spare.eviction_cost_gpu_s == 880.0
    p = plan(data, deterministic=True)
    assert p.status == "optimal"
    assert p.objective.admitted_gpus == {"1": 8, "2": 8, "3": 0}
    assert sorted((e.job, e.preemptors[0]) for e in p.evictions) == [
        ("run-t2", "new-t1"), ("run-t3", "new-t2")]


def test_spare_lower_greedy_leaves_free_gpus_to_lower_tiers() -> None:
    # Node a is free (8 GPUs); node b holds an evictable tier-2 job (8 x 50 = 400
    # GPU-s). Pending: one tier-1 and one tier-2 8-GPU job. Taking the free node for
    # tier 1 (cost 0) leaves tier 2 nothing (it may not evict tier 2). Sparing free
    # GPUs for the lower tier admits both: tier 1 evicts the tier-2 job on b (400),
    # tier 2 takes the free node a.
    from models import load_snapshot
    from planner.assemble import clean, objective_of
    from planner.greedy import GreedyPlanner
    from planner.problem import build_problem

    data = {"version": 1, "now": "2026-11-29T08:00:00Z",
            "nodes": [{"id": "a", "gpus": 8}, {"id": "b", "gpus": 8}],
            "jobs": [
                {"id": "run-t2", "tier": 2, "state": "running", "gpus_per_node": 8,
                 "started_at": "2026-11-29T00:00:00Z", "checkpoint": {"restore_s": 50},
                 "placement": [{"node": "b", "gpus": list(range(8))}]},
                {"id": "new-t1", "tier": 1, "state": "pending", "gpus_per_node": 8},
                {"id": "new-t2", "tier": 2, "state": "pending", "gpus_per_node": 8}]}
    pr = build_problem(load_snapshot(data))
    plain = objective_of(pr, clean(pr, GreedyPlanner(pr).solve()))
    spare = objective_of(pr, clean(pr, GreedyPlanner(pr, spare_lower=True).solve()))
    assert plain.admitted_gpus == {"1": 8, "2": 0, "3": 0}
    assert spare.admitted_gpus == {"1": 8, "2": 8, "3": 0}
    assert spare.eviction_cost_gpu_s == 400.0
    p = plan(data, deterministic=True)
    assert p.status == "optimal"
    assert p.objective.admitted_gpus == {"1": 8, "2": 8, "3": 0}
    placed = {pl.job: pl.placement[0].node for pl in p.placements}
    assert placed == {"new-t1": "b", "new-t2": "a"}
