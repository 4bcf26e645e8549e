"""Tests of the independent plan verifier (``planner.checks.verify``) and
``preempt-planner verify``.

One small story-like cluster (``snapshot()``) with a hand-computed valid plan
(``valid_plan()``); every test changes one thing and expects the rule it breaks.

The story, at Monday 2026-11-30 08:00Z: tier-1 ``train`` (4 GPUs) takes a1[0-3]
from tier-3 ``sweep`` (20 GB checkpoint, 4 GB/s local, 40 GB/s storage: flush
max(0.5, 5) = 5 s, grace max(60, 2 x 15) = 60 s, cost 4 x (100 + 5) = 420);
tier-1 ``serve`` takes a2[0-3] from tier-2 ``dev`` (no signal: grace = min_s = 60,
lost 30 min, cost 4 x (1800 + 50) = 7400); tier-3 ``small`` uses free a3[1,2];
``waiting`` is in backoff until 08:30; ``ghost`` sits on down node x1.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import cli
from models import InputError, load_plan, load_snapshot
from planner.checks.verify import Violation, is_valid, objective_of, verify

ROOT = Path(__file__).resolve().parents[1]
NOW = "2026-11-30T08:00:00Z"  # a Monday


# ---------------------------------------------------------------- fixtures


def snapshot_dict() -> dict[str, Any]:
    return {
        "version": 1,
        "now": NOW,
        "storage": [{"id": "nfs-a", "write_gb_per_s": 40.0}],
        "nodes": [
            {"id": "a1", "gpus": 8, "gpu_type": "H100", "nvlink": [[0, 1, 2, 3], [4, 5, 6, 7]],
             "block": "rack-1", "nvlink_domain": "nvl-1", "local_write_gb_per_s": 4.0},
            {"id": "a2", "gpus": 8, "gpu_type": "H100", "block": "rack-1",
             "nvlink_domain": "nvl-1"},
            {"id": "a3", "gpus": 4, "gpu_type": "H100",
             "nvlink": {"edges": [[0, 1], [1, 2], [2, 3]]}},
            {"id": "b1", "gpus": 8, "gpu_type": "A100", "pool": "reserved", "block": "rack-2"},
            {"id": "d1", "gpus": 8, "gpu_type": "H100", "state": "drain"},
            {"id": "x1", "gpus": 8, "gpu_type": "H100", "state": "down"},
        ],
        "jobs": [
            {"id": "sweep", "tier": 3, "priority": 1, "state": "running", "gpus_per_node": 4,
             "started_at": "2026-11-30T06:00:00Z",
             "placement": [{"node": "a1", "gpus": [0, 1, 2, 3]}],
             "checkpoint": {"size_gb": 20, "barrier_s": 5, "cleanup_s": 5, "restore_s": 100}},
            {"id": "young", "tier": 3, "state": "running", "gpus_per_node": 4,
             "started_at": "2026-11-30T07:50:00Z",
             "placement": [{"node": "a1", "gpus": [4, 5, 6, 7]}]},
            {"id": "dev", "tier": 2, "priority": 3, "state": "running", "gpus_per_node": 4,
             "started_at": "2026-11-30T05:00:00Z", "preemptions": 1,
             "last_preempted_at": "2026-11-29T12:00:00Z",
             "placement": [{"node": "a2", "gpus": [0, 1, 2, 3]}],
             "checkpoint": {"signal": None, "last_at": "2026-11-30T07:30:00Z",
                            "restore_s": 50}},
            {"id": "prod", "tier": 1, "state": "running", "gpus_per_node": 4,
             "started_at": "2026-11-30T04:00:00Z",
             "placement": [{"node": "a2", "gpus": [4, 5, 6, 7]}]},
            {"id": "resv", "tier": 1, "state": "running", "gpus_per_node": 4,
             "started_at": "2026-11-30T04:00:00Z",
             "placement": [{"node": "b1", "gpus": [0, 1, 2, 3]}]},
            {"id": "drained", "tier": 3, "state": "running", "gpus_per_node": 4,
             "started_at": "2026-11-30T04:00:00Z",
             "placement": [{"node": "d1", "gpus": [0, 1, 2, 3]}]},
            {"id": "ghost", "tier": 3, "state": "running", "gpus_per_node": 8,
             "started_at": "2026-11-30T04:00:00Z",
             "placement": [{"node": "x1", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}]},
            {"id": "train", "tier": 1, "priority": 10, "state": "pending", "gpus_per_node": 4,
             "gpu_type": "H100"},
            {"id": "serve", "tier": 1, "priority": 7, "state": "pending", "gpus_per_node": 4},
            {"id": "small", "tier": 3, "priority": 2, "state": "pending", "gpus_per_node": 2},
            {"id": "waiting", "tier": 2, "state": "pending", "gpus_per_node": 2,
             "preemptions": 4, "last_preempted_at": "2026-11-30T07:30:00Z"},
        ],
        "policy": {"pools": {"reserved": [1]}},
    }


def valid_plan() -> dict[str, Any]:
    return {
        "version": 1,
        "now": NOW,
        "status": "optimal",
        "objective": {"admitted_gpus": {"1": 8, "2": 0, "3": 2}, "priority_value": 72,
                      "eviction_cost_gpu_s": 7820.0, "evictions": 2},
        "evictions": [
            {"job": "sweep", "tier": 3, "preemptors": ["train"], "signal": "SIGTERM",
             "grace_s": 60, "flush_s": 5.0, "cost_gpu_s": 420.0,
             "requeue_hold_until": "2026-11-30T08:31:00Z"},
            {"job": "dev", "tier": 2, "preemptors": ["serve"], "signal": None,
             "grace_s": 60, "flush_s": 0.0, "cost_gpu_s": 7400.0,
             "requeue_hold_until": "2026-11-30T08:31:00Z"},
        ],
        "placements": [
            {"job": "train", "placement": [{"node": "a1", "gpus": [0, 1, 2, 3]}],
             "start_after_s": 60},
            {"job": "serve", "placement": [{"node": "a2", "gpus": [0, 1, 2, 3]}],
             "start_after_s": 60},
            {"job": "small", "placement": [{"node": "a3", "gpus": [1, 2]}], "start_after_s": 0},
        ],
        "deferred": [{"job": "waiting", "reason": "COOLDOWN", "until": "2026-11-30T08:30:00Z",
                      "detail": "preempted 4 times; held 3600 s"}],
        "storm": [{"storage": "nfs-a", "flush_gb": 20.0, "flush_s": 0.5}],
        "warnings": ["job 'ghost' sits on down node x1 and is ignored"],
        "solver": {"engine": "hand", "status": "OPTIMAL"},
    }


def job(d: dict[str, Any], jid: str) -> dict[str, Any]:
    return next(j for j in d["jobs"] if j["id"] == jid)


def ev(plan: dict[str, Any], jid: str) -> dict[str, Any]:
    return next(e for e in plan["evictions"] if e["job"] == jid)


def pl(plan: dict[str, Any], jid: str) -> dict[str, Any]:
    return next(p for p in plan["placements"] if p["job"] == jid)


def violations(snap: dict[str, Any], plan: dict[str, Any]) -> list[Violation]:
    return verify(load_snapshot(copy.deepcopy(snap)), load_plan(copy.deepcopy(plan)))


def codes(snap: dict[str, Any], plan: dict[str, Any]) -> set[str]:
    return {v.rule for v in violations(snap, plan)}


def assert_valid(snap: dict[str, Any], plan: dict[str, Any]) -> None:
    found = violations(snap, plan)
    assert found == [], "\n".join(map(str, found))


# ---------------------------------------------------------------- valid plans


def test_hand_written_plan_is_valid():
    snap, plan = load_snapshot(snapshot_dict()), load_plan(valid_plan())
    assert verify(snap, plan) == []
    assert is_valid(snap, plan)
    assert objective_of(snap, plan) == plan.objective


def test_contract_example_70b_is_valid():
    snap = load_snapshot(ROOT / "instances" / "example-70b.json")
    plan = load_plan({
        "version": 1, "now": "2026-11-29T08:00:00Z", "status": "optimal",
        "objective": {"admitted_gpus": {"1": 8, "2": 0, "3": 0}, "priority_value": 400,
                      "eviction_cost_gpu_s": 5305.0, "evictions": 1},
        "evictions": [{"job": "sweep-17", "tier": 3, "preemptors": ["finetune-70b"],
                       "signal": "SIGTERM", "grace_s": 60, "flush_s": 13.125,
                       "cost_gpu_s": 5305.0, "requeue_hold_until": "2026-11-29T08:31:00Z"}],
        "placements": [{"job": "finetune-70b",
                        "placement": [{"node": "dgx-002", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}],
                        "start_after_s": 60}],
        "deferred": [],
        "storm": [{"storage": "nfs-a", "flush_gb": 52.5, "flush_s": 1.3125}],
        "warnings": [],
        "solver": {"engine": "cp-sat", "status": "OPTIMAL", "wall_s": 0.12, "gap": 0.0},
    })
    assert verify(snap, plan) == []


def test_evict_nothing_plan_is_valid():
    """"When in doubt, evict nothing": only free GPUs used, everything else deferred."""
    plan = valid_plan()
    plan["evictions"], plan["storm"] = [], []
    plan["placements"] = [pl(plan, "small")]
    plan["deferred"] += [{"job": "train", "reason": "OUTRANKED"},
                         {"job": "serve", "reason": "PROTECTED"}]
    plan["objective"] = {"admitted_gpus": {"1": 0, "2": 0, "3": 2}, "priority_value": 4,
                         "eviction_cost_gpu_s": 0.0, "evictions": 0}
    assert_valid(snapshot_dict(), plan)


def test_violation_str_cites_rule():
    v = Violation("R7", "x", "job 'x' uses GPU 3 of dgx-002 held by tier-2 job 'y', which "
                             "tier 3 may not preempt")
    assert str(v) == ("R7: job 'x' uses GPU 3 of dgx-002 held by tier-2 job 'y', which tier 3 "
                      "may not preempt")


def test_objective_of_orders_plans():
    snap = load_snapshot(snapshot_dict())
    worse = valid_plan()
    worse["placements"] = [p for p in worse["placements"] if p["job"] != "small"]
    worse["deferred"].append({"job": "small", "reason": "OUTRANKED"})
    better_key = objective_of(snap, load_plan(valid_plan())).key()
    assert better_key > objective_of(snap, load_plan(worse)).key()


# ---------------------------------------------------------------- R1 capacity


@pytest.mark.parametrize("node, gpus, words", [
    ("a1", [4, 5], "still held by running job 'young'"),  # not evicted
    ("d1", [4, 5], "which is drain"),  # drain node takes no placement
    ("x1", [0, 1], "which is down"),
    ("a3", [3, 4], "GPU 4 of a3, which has only 4 GPUs"),  # out of range
    ("nowhere", [0, 1], "unknown node"),
])
def test_r1_capacity(node, gpus, words):
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": node, "gpus": gpus}]
    found = [v for v in violations(snapshot_dict(), plan) if v.rule == "R1"]
    assert found and found[0].job == "small"
    assert any(words in v.message for v in found), found


def test_r1_gpu_type_mismatch():
    snap = snapshot_dict()
    job(snap, "serve")["gpu_type"] = "A100"  # dev's GPUs on a2 are H100
    assert "R1" in codes(snap, valid_plan())


def test_r1_gpu_given_twice():
    plan = valid_plan()
    pl(plan, "serve")["placement"] = [{"node": "a1", "gpus": [0, 1, 2, 3]}]
    found = violations(snapshot_dict(), plan)
    assert any(v.rule == "R1" and "given to both 'train' and 'serve'" in v.message
               for v in found), found


def test_r1_gpu_given_to_three_jobs():
    # serve takes train's a1[0-3] and small a1[0, 1]: each GPU given twice or more is
    # one violation, its users in plan order, cited against the second
    plan = valid_plan()
    pl(plan, "serve")["placement"] = [{"node": "a1", "gpus": [0, 1, 2, 3]}]
    pl(plan, "small")["placement"] = [{"node": "a1", "gpus": [0, 1]}]
    found = [(v.job, v.message) for v in violations(snapshot_dict(), plan)
             if "given to" in v.message]
    assert found == [
        ("serve", "GPU 0 of a1 is given to both 'train' and 'serve' and 'small'"),
        ("serve", "GPU 1 of a1 is given to both 'train' and 'serve' and 'small'"),
        ("serve", "GPU 2 of a1 is given to both 'train' and 'serve'"),
        ("serve", "GPU 3 of a1 is given to both 'train' and 'serve'")]


def test_r1_gpu_index_past_any_integer_column():
    # a GPU index no 64-bit integer holds is out of the node's range like any other
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [1, 2 ** 70]}]
    found = [v.message for v in violations(snapshot_dict(), plan) if v.rule == "R1"]
    assert found == [f"job 'small' uses GPU {2 ** 70} of a3, which has only 4 GPUs (0..3)"]


# ---------------------------------------------------------------- R2 gang


def test_r2_wrong_gpu_count():
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [0, 1, 2]}]
    assert "R2" in codes(snapshot_dict(), plan)


def test_r2_wrong_node_count():
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [0, 1]}, {"node": "a3", "gpus": [2, 3]}]
    assert "R2" in codes(snapshot_dict(), plan)


def test_r2_multi_node_job_needs_all_its_nodes():
    snap = snapshot_dict()
    job(snap, "small").update(nodes=2, gpus_per_node=1, topology="any")
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [1]}]
    plan["objective"].update(admitted_gpus={"1": 8, "2": 0, "3": 2})
    assert codes(snap, plan) == {"R2"}


# ---------------------------------------------------------------- R3 topology


def test_r3_gpus_not_nvlink_connected():
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [0, 2]}]  # chain 0-1-2-3
    assert codes(snapshot_dict(), plan) == {"R3"}


def test_r3_island_crossing():
    snap = snapshot_dict()
    snap["nodes"][2]["nvlink"] = [[0, 1], [2, 3]]
    found = violations(snap, valid_plan())  # small on a3[1,2] spans both islands
    assert {v.rule for v in found} == {"R3"} and found[0].job == "small"
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [2, 3]}]
    assert_valid(snap, plan)


def test_r3_nvlink_none_node():
    snap = snapshot_dict()
    snap["nodes"][2]["nvlink"] = "none"
    assert codes(snap, valid_plan()) == {"R3"}
    job(snap, "small")["topology"] = "any"  # a job that does not need NVLink fits
    assert_valid(snap, valid_plan())


def test_r3_single_gpu_is_connected():
    snap = snapshot_dict()
    snap["nodes"][2]["nvlink"] = "none"
    job(snap, "small")["gpus_per_node"] = 1
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [2]}]
    plan["objective"].update(admitted_gpus={"1": 8, "2": 0, "3": 1}, priority_value=70)
    assert_valid(snap, plan)


@pytest.mark.parametrize("flag", ["same_block", "same_nvlink_domain"])
def test_r3_same_block_and_domain_bind_one_node_jobs(flag):
    snap = snapshot_dict()
    job(snap, "small")[flag] = True  # a3 has no block and no nvlink_domain
    found = violations(snap, valid_plan())
    assert {v.rule for v in found} == {"R3"} and found[0].job == "small"
    job(snap, "train")[flag] = True  # a1 has both
    assert {v.rule for v in violations(snap, valid_plan())} == {"R3"}


def test_r3_same_block_across_nodes():
    snap = snapshot_dict()
    job(snap, "small").update(nodes=2, gpus_per_node=1, same_block=True, topology="any")
    snap["nodes"][2]["block"] = "rack-1"
    snap["nodes"].append({"id": "c1", "gpus": 2, "block": "rack-9"})
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [0]}, {"node": "c1", "gpus": [0]}]
    assert codes(snap, plan) == {"R3"}
    snap["nodes"][-1]["block"] = "rack-1"
    assert_valid(snap, plan)


# ---------------------------------------------------------------- R4 pools


def test_r4_pool_does_not_admit_tier():
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "b1", "gpus": [4, 5]}]
    assert codes(snapshot_dict(), plan) == {"R4"}


# ---------------------------------------------------------------- R5, R6: protected victims


def test_r5_non_preemptible_tier():
    snap = snapshot_dict()
    snap["policy"]["tiers"] = {"1": {"can_preempt": [1, 2, 3]}}  # rights, but not preemptible
    plan = valid_plan()
    # an empty checkpoint still waits for the shared storage: flush = F_s / 40 = 0.5 s
    plan["evictions"][1] = {"job": "resv", "tier": 1, "preemptors": ["serve"],
                            "signal": "SIGTERM", "grace_s": 60, "flush_s": 0.5,
                            "cost_gpu_s": 0.0, "requeue_hold_until": "2026-11-30T08:31:00Z"}
    pl(plan, "serve")["placement"] = [{"node": "b1", "gpus": [0, 1, 2, 3]}]
    plan["objective"]["eviction_cost_gpu_s"] = 420.0
    found = violations(snap, plan)
    assert {v.rule for v in found} == {"R5"} and found[0].job == "resv"


def test_r6_immune_young_job():
    plan = valid_plan()
    plan["evictions"][0] = {"job": "young", "tier": 3, "preemptors": ["train"],
                            "signal": "SIGTERM", "grace_s": 60, "flush_s": 0.0,
                            "cost_gpu_s": 0.0, "requeue_hold_until": "2026-11-30T08:31:00Z"}
    pl(plan, "train")["placement"] = [{"node": "a1", "gpus": [4, 5, 6, 7]}]
    plan["storm"] = []
    plan["objective"]["eviction_cost_gpu_s"] = 7400.0
    found = violations(snapshot_dict(), plan)
    assert {v.rule for v in found} == {"R6"} and found[0].job == "young"


def test_r6_exactly_min_runtime_is_evictable():
    snap = snapshot_dict()
    job(snap, "young")["started_at"] = "2026-11-30T07:30:00Z"  # exactly 1800 s old
    plan = valid_plan()
    plan["evictions"][0] = {"job": "young", "tier": 3, "preemptors": ["train"],
                            "signal": "SIGTERM", "grace_s": 60, "flush_s": 0.0,
                            "cost_gpu_s": 0.0, "requeue_hold_until": "2026-11-30T08:31:00Z"}
    pl(plan, "train")["placement"] = [{"node": "a1", "gpus": [4, 5, 6, 7]}]
    plan["storm"] = []
    plan["objective"]["eviction_cost_gpu_s"] = 7400.0
    assert_valid(snap, plan)
    job(snap, "young")["started_at"] = "2026-11-30T07:30:01Z"
    assert codes(snap, plan) == {"R6"}


# ---------------------------------------------------------------- R7 rights


def test_r7_tier_may_not_preempt():
    plan = valid_plan()
    plan["placements"] = [pl(plan, "serve"), pl(plan, "small")]
    pl(plan, "small").update(placement=[{"node": "a1", "gpus": [0, 1]}], start_after_s=60)
    ev(plan, "sweep")["preemptors"] = ["small"]
    plan["deferred"].append({"job": "train", "reason": "OUTRANKED"})
    plan["objective"].update(admitted_gpus={"1": 4, "2": 0, "3": 2}, priority_value=32)
    found = violations(snapshot_dict(), plan)
    assert {v.rule for v in found} == {"R7"}
    assert ("R7: job 'small' uses GPU 0 of a1 held by tier-3 job 'sweep', which tier 3 may not "
            "preempt") in map(str, found)
    assert any(v.job == "sweep" and "beneficiary" in v.message for v in found)


def test_r7_eviction_without_beneficiary():
    plan = valid_plan()
    plan["evictions"].append({"job": "drained", "tier": 3, "preemptors": [],
                              "signal": "SIGTERM", "grace_s": 60, "flush_s": 0.5,
                              "cost_gpu_s": 0.0, "requeue_hold_until": "2026-11-30T08:31:00Z"})
    plan["objective"]["evictions"] = 3
    found = violations(snapshot_dict(), plan)
    assert {v.rule for v in found} == {"R7"} and found[0].job == "drained"


# ---------------------------------------------------------------- R8 windows


def test_r8_outside_window():
    snap = snapshot_dict()
    snap["policy"]["tiers"] = {"3": {"windows": [{"days": ["sat", "sun"], "start": "00:00",
                                                  "end": "06:00"}]}}
    found = violations(snap, valid_plan())
    assert {v.rule for v in found} == {"R8"} and found[0].job == "sweep"


def test_r8_inside_wrapping_window():
    snap = snapshot_dict()  # sun 22:00-09:00 covers Monday 08:00
    snap["policy"]["tiers"] = {"3": {"windows": [{"days": ["sun"], "start": "22:00",
                                                  "end": "09:00"}]}}
    assert_valid(snap, valid_plan())
    snap["policy"]["tiers"]["3"]["windows"][0]["end"] = "08:00"  # [start, end): 08:00 is out
    assert codes(snap, valid_plan()) == {"R8"}


# ---------------------------------------------------------------- R9, R10


def test_r9_backoff():
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [2, 3]}]
    plan["placements"].append({"job": "waiting", "placement": [{"node": "a3", "gpus": [0, 1]}]})
    plan["deferred"] = []
    plan["objective"]["admitted_gpus"]["2"] = 2
    found = violations(snapshot_dict(), plan)
    assert {v.rule for v in found} == {"R9"} and found[0].job == "waiting"


def test_r9_backoff_ends_at_hold_time():
    snap = snapshot_dict()
    job(snap, "waiting")["last_preempted_at"] = "2026-11-30T07:00:00Z"  # + 3600 s = now
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [2, 3]}]
    plan["placements"].append({"job": "waiting", "placement": [{"node": "a3", "gpus": [0, 1]}]})
    plan["deferred"] = []
    plan["objective"]["admitted_gpus"]["2"] = 2
    assert_valid(snap, plan)


def test_r10_cascade_guard():
    snap = snapshot_dict()
    snap["policy"].update(cascade_guard_s=3600, backoff={"cooldown_s": 300})
    job(snap, "serve").update(preemptions=1, last_preempted_at="2026-11-30T07:50:00Z")
    plan = valid_plan()
    for e in plan["evictions"]:
        e["requeue_hold_until"] = "2026-11-30T08:06:00Z"  # now + 60 + 300
    found = violations(snap, plan)
    assert {v.rule for v in found} == {"R10"} and found[0].job == "serve"
    job(snap, "serve")["last_preempted_at"] = "2026-11-30T07:00:00Z"  # exactly 3600 s ago
    assert_valid(snap, plan)


# ---------------------------------------------------------------- R11, R12 storm and grace


def test_r11_victim_cannot_flush_within_max_grace():
    snap = snapshot_dict()
    job(snap, "sweep")["checkpoint"]["size_gb"] = 400  # local 100 s -> need 220 s > 180
    plan = valid_plan()
    ev(plan, "sweep").update(grace_s=180, flush_s=100.0, cost_gpu_s=800.0,
                             requeue_hold_until="2026-11-30T08:33:00Z")
    pl(plan, "train")["start_after_s"] = 180
    plan["storm"] = [{"storage": "nfs-a", "flush_gb": 400.0, "flush_s": 10.0}]
    plan["objective"]["eviction_cost_gpu_s"] = 8200.0
    found = violations(snap, plan)
    assert {v.rule for v in found} == {"R11"} and found[0].job == "sweep"


def test_r11_storm_sums_victims_on_one_storage():
    snap = snapshot_dict()
    snap["storage"][0]["write_gb_per_s"] = 0.25
    job(snap, "dev")["checkpoint"] = {"size_gb": 1, "restore_s": 50}  # now it flushes too
    plan = valid_plan()
    # F = 21 GB at 0.25 GB/s = 84 s: sweep needs 2 x (84 + 10) = 188 > 180; dev 168
    ev(plan, "sweep").update(grace_s=180, flush_s=84.0, cost_gpu_s=720.0,
                             requeue_hold_until="2026-11-30T08:33:00Z")
    ev(plan, "dev").update(signal="SIGTERM", grace_s=170, flush_s=84.0, cost_gpu_s=216.0,
                           requeue_hold_until="2026-11-30T08:32:50Z")
    pl(plan, "train")["start_after_s"] = 180
    pl(plan, "serve")["start_after_s"] = 170
    plan["storm"] = [{"storage": "nfs-a", "flush_gb": 21.0, "flush_s": 84.0}]
    plan["objective"]["eviction_cost_gpu_s"] = 936.0
    found = violations(snap, plan)
    assert {v.rule for v in found} == {"R11"} and [v.job for v in found] == ["sweep"]


def test_r11_r12_bounds_are_inclusive():
    snap = snapshot_dict()
    snap["storage"][0]["write_gb_per_s"] = 0.25  # 20 GB -> 80 s, need exactly 180
    plan = valid_plan()
    ev(plan, "sweep").update(grace_s=180, flush_s=80.0, cost_gpu_s=720.0,
                             requeue_hold_until="2026-11-30T08:33:00Z")
    pl(plan, "train")["start_after_s"] = 180
    plan["storm"] = [{"storage": "nfs-a", "flush_gb": 20.0, "flush_s": 80.0}]
    plan["objective"]["eviction_cost_gpu_s"] = 8120.0
    assert_valid(snap, plan)


def test_r11_multi_node_victim_counts_once_on_first_node_storage():
    snap = snapshot_dict()
    snap["storage"] = [{"id": "nfs-a", "write_gb_per_s": 40.0},
                       {"id": "nfs-b", "write_gb_per_s": 10.0}]
    for n in snap["nodes"]:
        n["storage"] = "nfs-b" if n["id"] == "a3" else "nfs-a"
    job(snap, "sweep").update(nodes=2, gpus_per_node=2,
                 placement=[{"node": "a3", "gpus": [0, 1]}, {"node": "a1", "gpus": [0, 1]}])
    job(snap, "train").update(nodes=2, gpus_per_node=2, topology="nvlink")
    plan = valid_plan()
    # F_b = 20 GB / 10 = 2 s; local shard 10 GB / 4 = 2.5 s (a1) -> flush 2.5
    ev(plan, "sweep").update(flush_s=2.5, cost_gpu_s=4 * (100 + 2.5))
    pl(plan, "train")["placement"] = [{"node": "a1", "gpus": [0, 1]},
                                      {"node": "a3", "gpus": [0, 1]}]
    pl(plan, "small")["placement"] = [{"node": "a3", "gpus": [2, 3]}]
    plan["storm"] = [{"storage": "nfs-b", "flush_gb": 20.0, "flush_s": 2.0}]
    plan["objective"]["eviction_cost_gpu_s"] = 7400.0 + 410.0
    assert_valid(snap, plan)
    plan["storm"] = [{"storage": "nfs-a", "flush_gb": 20.0, "flush_s": 0.5}]
    assert codes(snap, plan) == {"STORM"}


def test_no_storage_targets_only_local_bandwidth_limits():
    snap = snapshot_dict()
    snap["storage"] = []
    plan = valid_plan()
    plan["storm"] = []  # no F_s anywhere; sweep still flushes 5 s to its local NVMe
    assert_valid(snap, plan)
    plan["storm"] = [{"storage": "nfs-a", "flush_gb": 20.0, "flush_s": 0.5}]
    assert codes(snap, plan) == {"STORM"}


@pytest.mark.parametrize("victim, grace, hold, start", [
    ("sweep", 50, "2026-11-30T08:30:50Z", 50),  # below need (60)
    ("sweep", 200, "2026-11-30T08:33:20Z", 200),  # above max_s (180)
    ("dev", 90, "2026-11-30T08:31:30Z", 90),  # no signal: exactly min_s
])
def test_r12_grace(victim, grace, hold, start):
    plan = valid_plan()
    ev(plan, victim).update(grace_s=grace, requeue_hold_until=hold)
    pl(plan, ev(plan, victim)["preemptors"][0])["start_after_s"] = start
    found = violations(snapshot_dict(), plan)
    assert {v.rule for v in found} == {"R12"} and found[0].job == victim


def test_r12_longer_grace_within_bounds_is_valid():
    plan = valid_plan()
    ev(plan, "sweep").update(grace_s=120, requeue_hold_until="2026-11-30T08:32:00Z")
    pl(plan, "train")["start_after_s"] = 120
    assert_valid(snapshot_dict(), plan)


# ---------------------------------------------------------------- R13 budgets


@pytest.mark.parametrize("cap, ok", [(0, False), (1, False), (2, True), (None, True)])
def test_r13_max_evictions_per_tick(cap, ok):
    snap = snapshot_dict()
    snap["policy"]["max_evictions_per_tick"] = cap
    assert codes(snap, valid_plan()) == (set() if ok else {"R13"})


@pytest.mark.parametrize("fraction, ok", [(0.2, False), (8 / 36, True), (2 / 9, True),
                                          (0.25, True)])
def test_r13_max_evicted_gpu_fraction(fraction, ok):
    snap = snapshot_dict()  # 36 GPUs on up/drain nodes (x1 is down); 8 evicted
    snap["policy"]["max_evicted_gpu_fraction"] = fraction
    assert codes(snap, valid_plan()) == (set() if ok else {"R13"})


# ---------------------------------------------------------------- section 6 formulas


def test_wrong_flush_s():
    plan = valid_plan()
    ev(plan, "sweep")["flush_s"] = 0.5  # the storage term alone; local NVMe dominates
    assert codes(snapshot_dict(), plan) == {"EVICTION"}


def test_wrong_cost():
    plan = valid_plan()
    ev(plan, "dev")["cost_gpu_s"] = 200.0  # forgot the work lost since last_at
    assert codes(snapshot_dict(), plan) == {"EVICTION"}


def test_wrong_start_after_s():
    plan = valid_plan()
    pl(plan, "train")["start_after_s"] = 0
    found = violations(snapshot_dict(), plan)
    assert {v.rule for v in found} == {"START"} and found[0].job == "train"
    plan = valid_plan()
    pl(plan, "small")["start_after_s"] = 60  # free GPUs only: 0
    assert codes(snapshot_dict(), plan) == {"START"}


def test_requeue_hold_until():
    plan = valid_plan()
    ev(plan, "sweep")["requeue_hold_until"] = "2026-11-30T08:30:00Z"  # forgot the grace
    assert codes(snapshot_dict(), plan) == {"EVICTION"}
    plan = valid_plan()
    ev(plan, "dev")["requeue_hold_until"] = "2026-11-30T08:31:00.400Z"  # to the second
    assert_valid(snapshot_dict(), plan)


def test_requeue_uses_next_cooldown():
    snap = snapshot_dict()
    job(snap, "dev")["preemptions"] = 3  # 4th preemption: 3600 s
    plan = valid_plan()
    assert codes(snap, plan) == {"EVICTION"}
    ev(plan, "dev")["requeue_hold_until"] = "2026-11-30T09:01:00Z"
    assert_valid(snap, plan)


@pytest.mark.parametrize("storm", [
    [{"storage": "nfs-a", "flush_gb": 20.0, "flush_s": 5.0}],  # wrong seconds
    [{"storage": "nfs-a", "flush_gb": 40.0, "flush_s": 1.0}],  # counted dev, which cannot flush
    [],  # missing
    [{"storage": "nfs-a", "flush_gb": 20.0, "flush_s": 0.5}] * 2,  # twice
    [{"storage": "nfs-a", "flush_gb": 20.0, "flush_s": 0.5},
     {"storage": "nfs-z", "flush_gb": 0.0, "flush_s": 0.0}],  # no flush there
])
def test_wrong_storm(storm):
    plan = valid_plan()
    plan["storm"] = storm
    assert codes(snapshot_dict(), plan) == {"STORM"}


@pytest.mark.parametrize("change", [
    {"admitted_gpus": {"1": 8, "2": 0, "3": 0}},
    {"admitted_gpus": {"1": 8, "3": 2}},  # every policy tier is listed
    {"priority_value": 70},
    {"eviction_cost_gpu_s": 7400.0},
    {"evictions": 1},
])
def test_wrong_objective(change):
    plan = valid_plan()
    plan["objective"].update(change)
    assert codes(snapshot_dict(), plan) == {"OBJECTIVE"}


def test_wrong_preemptors():
    plan = valid_plan()
    ev(plan, "sweep")["preemptors"] = ["train", "serve"]
    assert codes(snapshot_dict(), plan) == {"EVICTION"}
    ev(plan, "sweep")["preemptors"] = []
    assert codes(snapshot_dict(), plan) == {"EVICTION"}


def test_wrong_tier_or_signal_in_eviction():
    plan = valid_plan()
    ev(plan, "sweep")["tier"] = 2
    ev(plan, "dev")["signal"] = "SIGTERM"
    assert codes(snapshot_dict(), plan) == {"EVICTION"}


def test_missing_pending_job():
    plan = valid_plan()
    plan["deferred"] = []
    found = violations(snapshot_dict(), plan)
    assert {v.rule for v in found} == {"PLAN"} and found[0].job == "waiting"


def test_job_listed_twice():
    plan = valid_plan()
    plan["deferred"].append({"job": "small", "reason": "OUTRANKED"})
    assert codes(snapshot_dict(), plan) == {"PLAN"}
    plan = valid_plan()
    plan["deferred"].append(plan["deferred"][0])
    assert codes(snapshot_dict(), plan) == {"PLAN"}
    plan = valid_plan()
    plan["placements"].append(pl(plan, "small"))
    assert "PLAN" in codes(snapshot_dict(), plan)
    plan = valid_plan()
    plan["evictions"].append(ev(plan, "sweep"))
    assert "PLAN" in codes(snapshot_dict(), plan)


def test_running_job_placed_or_pending_job_evicted():
    plan = valid_plan()
    plan["placements"].append({"job": "prod", "placement": [{"node": "a2", "gpus": [4, 5, 6, 7]}]})
    assert codes(snapshot_dict(), plan) == {"PLAN"}
    plan = valid_plan()
    plan["evictions"].append({"job": "waiting", "tier": 2, "preemptors": [], "signal": "SIGTERM",
                              "grace_s": 60, "flush_s": 0, "cost_gpu_s": 0,
                              "requeue_hold_until": NOW})
    assert "PLAN" in codes(snapshot_dict(), plan)
    plan = valid_plan()
    plan["deferred"].append({"job": "nobody", "reason": "NO_FIT"})
    assert codes(snapshot_dict(), plan) == {"PLAN"}


def test_now_must_match():
    plan = valid_plan()
    plan["now"] = "2026-11-30T08:00:01Z"
    assert codes(snapshot_dict(), plan) == {"PLAN"}
    plan["now"] = "2026-11-30T09:00:00+01:00"  # the same instant in another zone
    assert_valid(snapshot_dict(), plan)


def test_invalid_reason_or_status_is_bad_input():
    plan = valid_plan()
    plan["deferred"][0]["reason"] = "BUSY"
    with pytest.raises(InputError):
        load_plan(plan)
    plan = valid_plan()
    plan["status"] = "infeasible"
    with pytest.raises(InputError):
        load_plan(plan)


def test_warnings_name_jobs_on_down_nodes():
    plan = valid_plan()
    plan["warnings"] = []
    found = violations(snapshot_dict(), plan)
    assert {v.rule for v in found} == {"WARNINGS"} and found[0].job == "ghost"
    plan["warnings"] = ["job 'ghost-2' is elsewhere"]  # a different id does not count
    assert codes(snapshot_dict(), plan) == {"WARNINGS"}


def test_warnings_are_read_as_whole_words():
    from planner.checks.verify import _mentioned, _mentions

    texts = ["running job 'job-10' has GPUs on down node(s) n1", "see a.b, x/y and (c+d)"]
    ids = ["job-1", "job-10", "job", "a.b", "a", "x/y", "x", "c+d", "c", "b", "10"]
    # by hand: named when bounded on both sides by neither a word character nor . or -
    # ("x" in "x/y", "c" in "(c+d)" and the word "job" in "running job" are; "job-1" in
    # "job-10" and "b" in "a.b" are not)
    named = {"job-10", "a.b", "x/y", "x", "c+d", "c", "job"}
    assert _mentioned(texts, ids) == named
    assert {j for j in ids if any(_mentions(t, j) for t in texts)} == named


def test_job_on_down_node_is_never_a_victim():
    snap = snapshot_dict()  # ghost keeps a3 while x1 is down
    job(snap, "ghost").update(nodes=2, gpus_per_node=4,
                              placement=[{"node": "a3", "gpus": [0, 1, 2, 3]},
                                         {"node": "x1", "gpus": [0, 1, 2, 3]}])
    plan = valid_plan()
    plan["evictions"] = [ev(plan, "sweep")]
    plan["placements"] = [pl(plan, "train")]
    plan["deferred"] += [{"job": "small", "reason": "OUTRANKED"},
                         {"job": "serve", "reason": "PROTECTED"}]
    plan["objective"] = {"admitted_gpus": {"1": 4, "2": 0, "3": 0}, "priority_value": 40,
                         "eviction_cost_gpu_s": 420.0, "evictions": 1}
    assert_valid(snap, plan)
    # serve takes ghost's a3 GPUs: a tier-1 beneficiary, everything else right
    plan["deferred"].pop()
    plan["placements"].append({"job": "serve", "placement": [{"node": "a3", "gpus": [0, 1, 2, 3]}],
                               "start_after_s": 60})
    plan["evictions"].append({"job": "ghost", "tier": 3, "preemptors": ["serve"],
                              "signal": "SIGTERM", "grace_s": 60, "flush_s": 0.5,
                              "cost_gpu_s": 0.0, "requeue_hold_until": "2026-11-30T08:31:00Z"})
    plan["objective"].update(admitted_gpus={"1": 8, "2": 0, "3": 0}, priority_value=68,
                             evictions=2)
    found = violations(snap, plan)
    assert {v.rule for v in found} == {"DOWN"} and found[0].job == "ghost"


# ---------------------------------------------------------------- CLI


def write(tmp_path: Path, name: str, doc: Any) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_cli_valid_plan_exits_0(tmp_path, capsys):
    snap = write(tmp_path, "snap.json", snapshot_dict())
    plan = write(tmp_path, "plan.json", valid_plan())
    assert cli.main(["verify", snap, plan]) == 0
    assert "plan is valid (2 evictions, 3 placements)" in capsys.readouterr().out


def test_cli_invalid_plan_exits_1(tmp_path, capsys):
    plan = valid_plan()
    pl(plan, "small")["placement"] = [{"node": "b1", "gpus": [4, 5]}]
    snap = write(tmp_path, "snap.json", snapshot_dict())
    path = write(tmp_path, "plan.json", plan)
    assert cli.main(["verify", snap, path]) == 1
    out = capsys.readouterr().out
    assert "R4: job 'small' (tier 3) is placed on b1 in pool 'reserved'" in out
    assert cli.main(["verify", snap, path, "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False
    assert [(v["rule"], v["job"]) for v in doc["violations"]] == [("R4", "small")]


def test_cli_policy_file_replaces_policy(tmp_path, capsys):
    snap = write(tmp_path, "snap.json", snapshot_dict())
    plan = write(tmp_path, "plan.json", valid_plan())
    policy = write(tmp_path, "policy.json", {"pools": {"reserved": [1]},
                                             "max_evictions_per_tick": 1})
    assert cli.main(["verify", snap, plan, "--policy", policy]) == 1
    assert "R13" in capsys.readouterr().out
    assert cli.main(["verify", snap, plan, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


@pytest.mark.parametrize("plan_text", [
    "{not json",
    json.dumps({"version": 1, "now": NOW}),  # missing fields
    json.dumps([1, 2, 3]),
])
def test_cli_bad_plan_exits_2(tmp_path, capsys, plan_text):
    snap = write(tmp_path, "snap.json", snapshot_dict())
    plan = write(tmp_path, "plan.json", plan_text)
    assert cli.main(["verify", snap, plan]) == 2
    assert "invalid input" in capsys.readouterr().err


def test_cli_bad_snapshot_or_missing_file_exits_2(tmp_path):
    bad = snapshot_dict()
    job(bad, "sweep")["placement"][0]["gpus"] = [0, 1, 2, 9]
    snap = write(tmp_path, "snap.json", bad)
    plan = write(tmp_path, "plan.json", valid_plan())
    assert cli.main(["verify", snap, plan]) == 2
    assert cli.main(["verify", str(tmp_path / "missing.json"), plan]) == 2
