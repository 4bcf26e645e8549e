"""What the problem says of each running job: its flush, storm cap, R11 verdict and
eviction cost (build_problem works these out from per-tick lookups; the numbers are
models.rules' formulas, worked by hand here)."""

from __future__ import annotations

from typing import Any

from models import load_snapshot
from models.rules import eviction_cost, immune_for_s
from planner.core.problem import build_problem

NOW = "2026-11-30T08:00:00Z"
OLD = "2026-11-30T04:00:00Z"  # 4 h before NOW: past every tier's min runtime


def _job(jid: str, parts: list[tuple[str, list[int]]], checkpoint: dict[str, Any],
         tier: int = 3, started_at: str = OLD) -> dict[str, Any]:
    return {"id": jid, "tier": tier, "state": "running", "gpus_per_node": len(parts[0][1]),
            "nodes": len(parts), "priority": 1, "started_at": started_at,
            "topology": "any", "checkpoint": checkpoint,
            "placement": [{"node": n, "gpus": g} for n, g in parts]}


def _snapshot() -> dict[str, Any]:
    ck = {"barrier_s": 0, "cleanup_s": 0, "restore_s": 0}
    return {
        "version": 1, "now": NOW,
        "storage": [{"id": "fs", "write_gb_per_s": 4}],
        "nodes": [{"id": "a", "gpus": 8, "storage": "fs", "local_write_gb_per_s": 2},
                  {"id": "b", "gpus": 8, "storage": "fs"},
                  {"id": "c", "gpus": 8, "storage": "fs", "state": "down"},
                  {"id": "d", "gpus": 8, "storage": "fs"}],
        "jobs": [
            # a 2 x 4-GPU gang: its shard is 32 GB, 16 s at a's local 2 GB/s; alone on
            # the storage 64 / 4 = 16 s; so solo flush 16 s and cost 8 x (30 + 16) = 368.
            # Storm cap: (180 / 2 - 5 - 5) s x 4 GB/s = 320 GB >= 64: R11 holds
            _job("g", [("a", [0, 1, 2, 3]), ("b", [0, 1, 2, 3])],
                 {"size_gb": 64, "barrier_s": 5, "cleanup_s": 5, "restore_s": 30}),
            # 400 GB from one node of a: 200 s locally > 90 s of slack: no storm cap;
            # R11 protects it (need 2 x 200 = 400 s > 180 s); cost 4 x 200 = 800
            _job("h", [("a", [4, 5, 6, 7])], {"size_gb": 400, **ck}),
            # no signal: it loses the hour since its checkpoint; 4 x (3600 + 60) = 14,640
            _job("k", [("b", [4, 5, 6, 7])],
                 {"size_gb": 100, "signal": None, "last_at": "2026-11-30T07:00:00Z",
                  "barrier_s": 0, "cleanup_s": 0, "restore_s": 60}),
            # on a down node; and a tier-2 job 10 minutes old (R6: 50 min left)
            _job("x", [("c", [0, 1, 2, 3])], {"size_gb": 8, **ck}),
            _job("y", [("d", [0, 1, 2, 3])], {"size_gb": 8, **ck}, tier=2,
                 started_at="2026-11-30T07:50:00Z"),
        ],
        "policy": {},
    }


def test_flush_storm_cap_r11_and_cost_per_running_job() -> None:
    snap = load_snapshot(_snapshot())
    p = build_problem(snap)
    got = {j: (v.evictable, v.rule, v.cost, v.flush_gb, v.flushing, v.storm_cap_gb)
           for j, v in p.running.items()}
    assert got == {
        "g": (True, "", 368.0, 64.0, True, 320.0),
        "h": (False, "R11", 800.0, 400.0, True, -1.0),
        "k": (True, "", 14640.0, 0.0, False, float("inf")),
        "x": (False, "down", 4 * 2.0, 8.0, True, 90.0 * 4),
        "y": (False, "R6", 4 * 2.0, 8.0, True, 90.0 * 4),
    }
    assert p.running["h"].why_not == ("its checkpoint flush needs a grace of 400 s > "
                                      "grace.max_s 180 s")
    assert p.running["y"].why_not == "immune for another 50 min"
    # the same numbers as the contract's formulas, job by job
    for j in snap.running():
        assert p.running[j.id].cost == eviction_cost(snap, j)
    assert immune_for_s(snap.policy, snap.now, snap.job_map()["y"]) == 3000.0
    # the owner map and the GPUs held per node
    assert p.owner[(0, 5)] == "h" and p.owner[(1, 0)] == "g" and p.owner[(3, 3)] == "y"
    assert [nd.held.bit_count() for nd in p.nodes] == [8, 8, 4, 4]
