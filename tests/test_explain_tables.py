"""The explanations' per-node tables (planner/checks/explain.py): GPU masks held in
numpy arrays, int64 for nodes of up to 62 GPUs and Python ints (object arrays) for
wider ones; both kinds give the same sentences."""

from __future__ import annotations

from typing import Any

import pytest

from models import SolverInfo, load_snapshot
from planner import plan
from planner.checks import explain
from planner.checks.assemble import assemble
from planner.core.decision import Decision
from planner.core.problem import build_problem
from planner.heuristics.baselines import get_baseline
from planner.sim.generate import generate

NOW = "2026-11-30T08:00:00Z"
DAY_AGO = "2026-11-29T08:00:00Z"


def _running(jid: str, tier: int, node: str, gpus: range) -> dict[str, Any]:
    return {"id": jid, "tier": tier, "state": "running", "gpus_per_node": len(gpus),
            "topology": "any", "started_at": DAY_AGO,
            "placement": [{"node": node, "gpus": list(gpus)}]}


def test_a_node_of_128_gpus_is_explained_with_its_masks_as_python_ints() -> None:
    # big (128 GPUs) holds tier-1 keep on GPUs 0-99 and tier-3 old on 100-127;
    # small (8 GPUs) holds tier-1 full. Tier-2 take (20 GPUs) evicts old and starts
    # on 20 of its 28 GPUs; tier-2 want (64 GPUs) could have only 28 of big's GPUs
    # even with old gone, and keep, tier 1, is never preempted: PROTECTED, naming big
    snap = {"version": 1, "now": NOW, "storage": [],
            "nodes": [{"id": "big", "gpus": 128, "nvlink": "none"},
                      {"id": "small", "gpus": 8}],
            "jobs": [_running("keep", 1, "big", range(100)),
                     _running("old", 3, "big", range(100, 128)),
                     _running("full", 1, "small", range(8)),
                     {"id": "want", "tier": 2, "state": "pending", "gpus_per_node": 64,
                      "topology": "any", "priority": 5},
                     {"id": "take", "tier": 2, "state": "pending", "gpus_per_node": 20,
                      "topology": "any", "priority": 9}],
            "policy": {"thrash": {"max_gpu_fraction": None}}}
    problem = build_problem(load_snapshot(snap))
    assert explain._node_table(problem)[0].dtype == object
    p = plan(snap, deterministic=True, workers=1)
    assert [(x.job, [part.node for part in x.placement]) for x in p.placements] == [
        ("take", ["big"])]
    assert [e.job for e in p.evictions] == ["old"]
    assert [(d.job, d.reason, d.detail) for d in p.deferred] == [
        ("want", "PROTECTED", ("needs 64 GPUs; big could free them only by evicting tier-1 "
                               "job keep, tier 1 is not preemptible (R5)"))]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_int64_and_python_int_masks_give_the_same_explanations(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # 96 nodes of 8 GPUs, 90% held, 120 pending jobs: every deferred job of the
    # greedy plan and of no plan at all, explained from int64 masks and again from
    # Python ints (as for nodes wider than 62 GPUs), word for word
    problem = build_problem(load_snapshot(generate(96, pending=120, seed=seed)))
    decisions = [get_baseline("greedy")(problem).solve(), Decision()]

    def said() -> list[list[tuple[str, Any, str]]]:
        out = []
        for d in decisions:
            explain.forget(problem)
            p = assemble(problem, d, "feasible", SolverInfo(engine="test", status="TEST"))
            out.append([(x.job, x.reason, x.detail or "") for x in p.deferred])
        return out

    narrow = said()
    assert explain._node_table(problem)[0].dtype != object
    monkeypatch.setattr(explain, "_NARROW", 0)
    wide = said()
    assert explain._node_table(problem)[0].dtype == object
    assert wide == narrow
    assert sum(map(len, narrow)) > 100  # (most of 120 pending jobs, twice)
    assert {r for ds in narrow for _j, r, _d in ds} >= {"OUTRANKED", "PROTECTED"}
