"""What the problem says of each running job: its flush, storm cap, R11 verdict and
eviction cost (build_problem works these out from per-tick lookups; the numbers are
models.rules' formulas, worked by hand here)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from models import load_snapshot
from models.rules import eviction_cost, immune_for_s
from planner.core.problem import GpuOwners, build_problem

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


def _reference(snap: Any, j: Any) -> tuple[bool, str, float, float]:
    """A running job's (evictable, rule, cost, storm cap) straight from the contract's
    formulas (models.rules) and rules R5, down node, R6, R8, R17, R11 in that order."""
    from models.rules import (
        flushes,
        local_flush_s,
        solo_flush_s,
        victim_storage,
    )
    from planner.core.problem import ending_soon

    pol, now, nodes = snap.policy, snap.now, snap.node_map()
    g, ck = pol.grace, j.checkpoint
    stor, local = victim_storage(snap, j, nodes), local_flush_s(nodes, j)
    cap = float("inf")
    if flushes(j):
        slack = g.max_s / g.safety - ck.barrier_s - ck.cleanup_s
        cap = (-1.0 if slack < local - 1e-12 or slack < 0
               else float("inf") if stor is None else slack * stor.write_gb_per_s)
    tp = pol.tier(j.tier)
    rule = ("R5" if not tp.preemptible
            else "down" if any(nodes[p.node].state == "down" for p in j.placement)
            else "R6" if immune_for_s(pol, now, j) > 0
            else "R8" if not tp.preemptible_at(now)
            else "R17" if ending_soon(pol, now, j) is not None
            else "R11" if flushes(j) and (cap < 0 or ck.size_gb > cap + 1e-9)
            else "")
    assert solo_flush_s(snap, j, nodes) >= 0
    return rule == "", rule, eviction_cost(snap, j), cap


def test_every_running_job_reads_as_the_contract_formulas_give_it() -> None:
    # Random generated ticks (local write bandwidth on most nodes, down and drain
    # nodes) under random policies (short graces: R11 binds), with some jobs
    # without a signal, some expected to end within spare_ending_within_s (R17) and
    # windows that exclude now (08:00) for tier 3 on some ticks (R8): every VictimInfo has
    # the verdict, rule, cost and storm cap of the formulas.
    import random
    from datetime import datetime, timedelta

    from snapshot_parts import random_policy, random_tick

    seen: set[str] = set()
    for case in range(40):
        r = random.Random(case)
        data = random_tick(r, case, pending=(3,))
        data["policy"] = random_policy(r)
        if case % 3 == 0:
            data["policy"].setdefault("tiers", {})["3"] = {
                "windows": [{"start": "20:00", "end": "06:00"}]}
        data["policy"]["spare_ending_within_s"] = 900
        now = datetime.fromisoformat(data["now"])
        for j in data["jobs"]:
            if j["state"] != "running":
                continue
            x = r.random()
            if x < 0.2:
                j.setdefault("checkpoint", {})["signal"] = None
            elif x < 0.4:
                j["expected_end_at"] = (now + timedelta(minutes=r.choice([5, 60]))
                                        ).isoformat().replace("+00:00", "Z")
        snap = load_snapshot(data)
        p = build_problem(snap)
        for j in snap.running():
            v = p.running[j.id]
            assert (v.evictable, v.rule, v.cost, v.storm_cap_gb) == _reference(snap, j), j.id
            seen.add(v.rule)
        # the evictable ones on more than one node, cheapest first, then by id
        multi = sorted((_reference(snap, j)[2], j.id) for j in snap.running()
                       if _reference(snap, j)[0] and len(j.placement) > 1)
        assert p.multi_node_victims() == [jid for _cost, jid in multi]
        seen.add("multi" if multi else "")
    assert {"", "R6", "R8", "R11", "R17", "multi"} <= seen


def test_the_owner_map_answers_per_gpu_from_the_jobs_of_each_node() -> None:
    owners = GpuOwners(2)
    owners.add(0, 0b1111, "a")  # GPUs 0-3 of node 0
    owners.add(0, 0b100000, "b")  # GPU 5 of node 0
    owners.add(1, 0b11, "a")  # a gang: GPUs 0-1 of node 1
    assert [owners.get((0, g)) for g in range(8)] == ["a"] * 4 + [None, "b", None, None]
    assert owners[(1, 1)] == "a" and (1, 1) in owners and (1, 2) not in owners
    assert (2, 0) not in owners and (0, -1) not in owners and "x" not in owners
    with pytest.raises(KeyError):
        owners[(0, 4)]
    assert len(owners) == 7
    assert sorted(owners) == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 5), (1, 0), (1, 1)]
    assert dict(owners.items()) == {(0, 0): "a", (0, 1): "a", (0, 2): "a", (0, 3): "a",
                                    (0, 5): "b", (1, 0): "a", (1, 1): "a"}
    kept = owners.copy()
    owners.drop(0, "a")  # a leaves node 0: its GPUs there are nobody's; the copy keeps them
    assert owners.get((0, 0)) is None and owners.get((0, 5)) == "b" and owners[(1, 0)] == "a"
    assert kept[(0, 0)] == "a" and len(kept) == 7 and len(owners) == 3
    assert owners != kept and kept == dict(kept.items())


def test_owners_count_and_sort_each_nodes_jobs_by_id() -> None:
    owners = GpuOwners(2)
    owners.add(0, 0b1100, "z")
    owners.add(0, 0b0011, "b")
    owners.add(1, 0b1, "q")
    owners.add(0, 0b110000, "m")
    assert [owners.count(0), owners.count(1)] == [3, 1]
    assert owners.on(0, 0b111111) == [("z", 0b1100), ("b", 0b11), ("m", 0b110000)]
    owners.sort([1])  # node 0 untouched
    assert [jid for jid, _m in owners.on(0, 0b111111)] == ["z", "b", "m"]
    owners.sort()
    assert owners.on(0, 0b111111) == [("b", 0b11), ("m", 0b110000), ("z", 0b1100)]


def test_running_jobs_read_in_the_snapshots_order_come_out_in_the_order_of_ids() -> None:
    # the snapshot lists y, x, k, h, g; the problem keys them by id, each node's GPU
    # holders too, and running_any_order() gives the same VictimInfos in the snapshot's
    # order. Evictable: g (cost 368) and k (14,640); h is R11, x down, y R6. Node b holds
    # g (GPUs 0-3) and k (4-7): cheapest first g, then k
    data = _snapshot()
    data["jobs"] = data["jobs"][::-1]
    p = build_problem(load_snapshot(data))
    assert list(p.running) == ["g", "h", "k", "x", "y"]
    assert [v.job.id for v in p.running_any_order()] == ["y", "x", "k", "h", "g"]
    assert all(v is p.running[v.job.id] for v in p.running_any_order())
    b = p.node_index["b"]
    assert p.owner.on(b, 0xFF) == [("g", 0b1111), ("k", 0b11110000)]
    by_node, vmask = p.victims_by_node()
    assert by_node[b] == ["g", "k"] and vmask[("k", b)] == 0b11110000
    assert [(v.job.id, m) for v, m in p.victim_pairs_by_node()[b]] == [
        ("g", 0b1111), ("k", 0b11110000)]
    # a copy with other pending jobs keeps the order; one with other running jobs (as
    # LNS makes) reads its own dict
    assert list(p.with_pending({}).running_any_order()) == list(p.running_any_order())
    fewer = dataclasses.replace(p, running={"g": p.running["g"]})
    assert [v.job.id for v in fewer.running_any_order()] == ["g"]
