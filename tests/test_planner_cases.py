"""Acceptance cases of the CP-SAT planner: small stories with hand-computed optima.

Every story is a tiny cluster (at Monday 2026-11-30 08:00Z unless it says
otherwise) whose optimal plan was worked out by hand from the contract
(/work/shared/spec/format-v1.md): the reasoning and the arithmetic are in the
comments, never copied from the planner's output. Each test plans with
``planner="cpsat", deterministic=True``, runs the plan through the verifier
and then pins everything the contract determines: status, evictions (grace,
flush, cost, requeue hold, preemptors), placements (node, and the GPU set where
only one is right), start_after_s, storm, warnings, the objective (items 1-5)
and every deferred job's reason code.

Conventions unless a story says otherwise: 8-GPU NVSwitch nodes, the default
policy, no storage target, and checkpoints of size 0 with a signal, so a
victim's cost is ``gpus * restore_s``, its flush is 0 and its grace is
``max(min_s, 2 x (0 + 0 + 0)) = 60`` s; its requeue hold is then
``now + 60 + cooldown(1) = now + 60 + 1800 s = 08:31:00Z``. Running jobs start at
04:00, past every tier's min runtime (R6).

Rules and reason codes covered (test names in brackets):
R1 [gpu_type_and_no_fit, drain_and_down], R2 [gang_whole_nodes, gang_victim_*],
R3 [nvlink_pairs, nvlink_edges, same_block_domain], R4 [pools], R5 [equal_tiers],
R6 [immunity], R7 [equal_tiers, rights_of_freed_gpus], R8 [windows], R9 [backoff],
R10 [cascade_guard], R11 [storm_*], R12 [example_70b, storm_*, no_signal,
gang_victim_*], R13 [budget_*]; COOLDOWN, CASCADE_GUARD, NO_FIT, PROTECTED, STORM,
BUDGET, OUTRANKED.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from models import load_snapshot
from planner import plan
from planner.checks.verify import verify

ROOT = Path(__file__).resolve().parents[1]
NOW = "2026-11-30T08:00:00Z"  # a Monday
OLD = "2026-11-30T04:00:00Z"  # 4 h ago: past every tier's min runtime
HOLD = "2026-11-30T08:31:00Z"  # now + grace 60 + cooldown(1) 1800
ALL8 = list(range(8))
LOW4 = [0, 1, 2, 3]
HIGH4 = [4, 5, 6, 7]


# ---------------------------------------------------------------- builders


def node(nid: str, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return {"id": nid, "gpus": gpus, **kw}


def run(jid: str, tier: int, where: dict[str, list[int]], *, started: str = OLD,
        restore: float = 100.0, ck: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """A running job placed on ``{node: gpus}`` (the same GPU count on each node);
    its checkpoint has size 0 and a signal unless ``ck`` says otherwise."""
    per = {len(g) for g in where.values()}
    assert len(per) == 1
    return {"id": jid, "tier": tier, "state": "running", "gpus_per_node": per.pop(),
            "nodes": len(where), "started_at": started,
            "checkpoint": {"restore_s": restore, **(ck or {})},
            "placement": [{"node": n, "gpus": g} for n, g in where.items()], **kw}


def pend(jid: str, tier: int, gpus: int, **kw: Any) -> dict[str, Any]:
    return {"id": jid, "tier": tier, "state": "pending", "gpus_per_node": gpus, **kw}


def snap(nodes: list[dict], jobs: list[dict], policy: dict | None = None,
         storage: list[dict] | None = None, now: str = NOW) -> dict[str, Any]:
    return {"version": 1, "now": now, "storage": storage or [], "nodes": nodes, "jobs": jobs,
            "policy": policy or {}}


def solve(data: dict[str, Any], planner: str = "cpsat") -> dict[str, Any]:
    """Plan (deterministically for CP-SAT), verify, and return the plan as JSON data."""
    p = plan(data, planner=planner, deterministic=True, time_limit_s=5.0)
    problems = verify(load_snapshot(data), p)
    assert problems == [], [str(v) for v in problems]
    return p.model_dump(mode="json")


def obj(t1: int = 0, t2: int = 0, t3: int = 0, prio: int = 0, cost: float = 0.0,
        evictions: int = 0) -> dict[str, Any]:
    return {"admitted_gpus": {"1": t1, "2": t2, "3": t3}, "priority_value": prio,
            "eviction_cost_gpu_s": cost, "evictions": evictions}


def ev(preemptors: list[str], grace: float = 60, cost: float = 0.0, flush: float = 0.0,
       hold: str = HOLD, signal: str | None = "SIGTERM") -> dict[str, Any]:
    return {"preemptors": preemptors, "grace_s": grace, "flush_s": flush, "cost_gpu_s": cost,
            "requeue_hold_until": hold, "signal": signal}


def at(start: float = 0, **where: list[int] | None) -> dict[str, Any]:
    """An expected placement: node -> GPUs (None: any GPUs on that node)."""
    return {"where": where, "start": start}


def check(p: dict[str, Any], *, evictions: dict[str, dict[str, Any]],
          placements: dict[str, dict[str, Any] | None], deferred: dict[str, str],
          objective: dict[str, Any], storm: list[tuple[str, float, float]] | None = None,
          status: str | tuple[str, ...] = "optimal", warnings: int = 0) -> None:
    """Assert a plan against the hand-computed answer. ``placements[job]`` None
    means placed, but where is not determined (checked by the caller)."""
    statuses = (status,) if isinstance(status, str) else status
    assert p["status"] in statuses, p["solver"]
    got_ev = {e["job"]: e for e in p["evictions"]}
    assert set(got_ev) == set(evictions)
    for jid, want in evictions.items():
        e = got_ev[jid]
        assert e["preemptors"] == sorted(want["preemptors"]), jid
        assert e["signal"] == want["signal"], jid
        assert e["grace_s"] == pytest.approx(want["grace_s"]), jid
        assert e["flush_s"] == pytest.approx(want["flush_s"]), jid
        assert e["cost_gpu_s"] == pytest.approx(want["cost_gpu_s"]), jid
        assert e["requeue_hold_until"] == want["requeue_hold_until"], jid
    got_pl = {q["job"]: q for q in p["placements"]}
    assert set(got_pl) == set(placements)
    for jid, want_pl in placements.items():
        if want_pl is None:
            continue
        q = got_pl[jid]
        where = {part["node"]: part["gpus"] for part in q["placement"]}
        assert set(where) == set(want_pl["where"]), jid
        for n, gpus in want_pl["where"].items():
            if gpus is not None:
                assert where[n] == gpus, (jid, n)
        assert q["start_after_s"] == pytest.approx(want_pl["start"]), jid
    assert {d["job"]: d["reason"] for d in p["deferred"]} == deferred
    assert p["objective"]["admitted_gpus"] == objective["admitted_gpus"]
    assert p["objective"]["priority_value"] == objective["priority_value"]
    assert p["objective"]["eviction_cost_gpu_s"] == pytest.approx(
        objective["eviction_cost_gpu_s"])
    assert p["objective"]["evictions"] == objective["evictions"]
    got_storm = [(s["storage"], s["flush_gb"], s["flush_s"]) for s in p["storm"]]
    want_storm = storm or []
    assert [s[0] for s in got_storm] == [s[0] for s in want_storm]
    for got, want in zip(got_storm, want_storm):  # approx takes flat sequences only
        assert got[1:] == pytest.approx(want[1:]), got[0]
    assert len(p["warnings"]) == warnings


def nodes_of(p: dict[str, Any], jid: str) -> dict[str, list[int]]:
    q = next(q for q in p["placements"] if q["job"] == jid)
    return {part["node"]: part["gpus"] for part in q["placement"]}


def deferred_entry(p: dict[str, Any], jid: str) -> dict[str, Any]:
    return next(d for d in p["deferred"] if d["job"] == jid)


# ---------------------------------------------------------------- R12: the contract's example


def test_example_70b_grace_60() -> None:
    # instances/example-70b.json (now Sunday 2026-11-29 08:00Z): sweep-17 holds dgx-002;
    # dgx-001's pretrain-70b is tier 1 (R5). sweep-17: 52.5 GB, local 4 GB/s, nfs-a 40 GB/s:
    # F = 52.5, flush = max(52.5/40 = 1.3125, 52.5/4 = 13.125) = 13.125 s;
    # need = max(60, 2 x (13.125 + 10 + 5)) = max(60, 56.25) = 60 -> grace 60;
    # cost = 8 x (0 + 650 + 13.125) = 5305; hold 08:00 + 60 + 1800 = 08:31:00Z.
    data = json.loads((ROOT / "instances" / "example-70b.json").read_text())
    p = solve(data)
    check(p, evictions={"sweep-17": ev(["finetune-70b"], 60, 5305.0, 13.125,
                                       "2026-11-29T08:31:00Z")},
          placements={"finetune-70b": at(60, **{"dgx-002": ALL8})}, deferred={},
          objective=obj(t1=8, prio=400, cost=5305.0, evictions=1),
          storm=[("nfs-a", 52.5, 1.3125)])
    assert p["evictions"][0]["tier"] == 3


# ---------------------------------------------------------------- R11/R12: storms


def test_storm_only_some_cheap_victims_go() -> None:
    # One target fs at 10 GB/s; grace max 180, safety 2, barrier = cleanup = 0: need =
    # max(60, 2 x F/10) <= 180 allows F <= 900 GB, i.e. three of the four 300 GB victims.
    # Costs 8 x (restore + 300/10): v1 8 x 130 = 1040, v2 1840, v3 2640, v4 3440.
    # Four tier-1 8-GPU jobs: at most 3 nodes (24 GPUs); priority picks j1, j2, j3
    # (8 x (40+30+20) = 720); cost picks v1, v2, v3 = 5520. F = 900: flush 90 s,
    # need 2 x 90 = 180 = grace (the bound is inclusive); hold 08:00 + 180 + 1800 = 08:33.
    # j4 could have v4's node but for the storm: STORM.
    nodes = [node(f"n{i}") for i in range(1, 5)]
    jobs = [run(f"v{i}", 3, {f"n{i}": ALL8}, restore=100.0 * i, ck={"size_gb": 300})
            for i in range(1, 5)]
    jobs += [pend(f"j{i}", 1, 8, priority=50 - 10 * i) for i in range(1, 5)]
    policy = {"grace": {"min_s": 60, "max_s": 180, "safety": 2}}
    p = solve(snap(nodes, jobs, policy, storage=[{"id": "fs", "write_gb_per_s": 10.0}]))
    hold = "2026-11-30T08:33:00Z"
    # which of j1-j3 lands on which freed node is not determined: read it from the plan
    got = {e["job"]: e for e in p["evictions"]}
    assert sorted(got) == ["v1", "v2", "v3"]
    on = {next(iter(nodes_of(p, j))): j for j in ("j1", "j2", "j3")}
    assert sorted(on) == ["n1", "n2", "n3"]
    check(p, evictions={v: ev([on[f"n{v[1]}"]], 180, c, 90.0, hold)
                        for v, c in (("v1", 1040.0), ("v2", 1840.0), ("v3", 2640.0))},
          placements={j: at(180, **{n: ALL8}) for n, j in on.items()},
          deferred={"j4": "STORM"},
          objective=obj(t1=24, prio=720, cost=5520.0, evictions=3),
          storm=[("fs", 900.0, 90.0)])


def test_storm_names_only_the_targets_in_the_way() -> None:
    # fs-a (a1-a3) and fs-b (b1), both 10 GB/s; grace max 180, safety 2: F <= 900 GB per
    # target. fs-a holds tier-3 va1-va3 (450 GB each, restore 100/200/300: cost 8 x
    # (restore + 45) = 1160, 1960, 2760), fs-b vb1 (100 GB, restore 100: 8 x 110 = 880).
    # Tier-1 j1-j4 (8 GPUs, priority 40/30/20/10): only two fs-a victims fit in 900 GB, so
    # j1-j3 take va1, va2 and vb1 (720 priority, cost 4000) and j4 waits (STORM). Its
    # only way in, va3, would overload fs-a; fs-b is loaded too but not in its way.
    nodes = [node(n, storage="fs-a") for n in ("a1", "a2", "a3")] + [node("b1", storage="fs-b")]
    jobs = [run(f"va{i}", 3, {f"a{i}": ALL8}, restore=100.0 * i, ck={"size_gb": 450})
            for i in (1, 2, 3)]
    jobs += [run("vb1", 3, {"b1": ALL8}, ck={"size_gb": 100})]
    jobs += [pend(f"j{i}", 1, 8, priority=50 - 10 * i) for i in range(1, 5)]
    policy = {"grace": {"min_s": 60, "max_s": 180, "safety": 2}}
    storage = [{"id": "fs-a", "write_gb_per_s": 10.0}, {"id": "fs-b", "write_gb_per_s": 10.0}]
    p = solve(snap(nodes, jobs, policy, storage=storage))
    assert sorted(e["job"] for e in p["evictions"]) == ["va1", "va2", "vb1"]
    assert p["objective"] == obj(t1=24, prio=720, cost=4000.0, evictions=3)
    assert [(x["storage"], x["flush_gb"], x["flush_s"]) for x in p["storm"]] == [
        ("fs-a", 900.0, 90.0), ("fs-b", 100.0, 10.0)]
    assert {d["job"]: d["reason"] for d in p["deferred"]} == {"j4": "STORM"}
    assert deferred_entry(p, "j4")["detail"] == (
        "needs 8 GPUs (NVLink); its victims' checkpoints would have to flush to fs-a, already "
        "loaded by this tick's evictions, beyond what grace.max_s 180 s allows (R11); retry "
        "next tick")


def test_storm_victim_too_big_even_alone() -> None:
    # big: 1000 GB at 10 GB/s -> 100 s alone, need 2 x 100 = 200 > 180: it cannot be
    # evicted this tick (R11), so the tier-1 job waits with STORM and nothing is evicted.
    nodes = [node("n1")]
    jobs = [run("big", 3, {"n1": ALL8}, ck={"size_gb": 1000}), pend("t1", 1, 8)]
    p = solve(snap(nodes, jobs, storage=[{"id": "fs", "write_gb_per_s": 10.0}]))
    check(p, evictions={}, placements={}, deferred={"t1": "STORM"}, objective=obj())


# ---------------------------------------------------------------- item 4 against the baselines


# k8s and Slurm rank victim sets by their own rules, not by cost:
# "tier": n1 holds tier-2 dev (4 GPUs, restore 10: cost 40), n2 tier-3 sweep (4 GPUs,
#   restore 1000: cost 4000), the other halves tier 1. Both baselines take one victim
#   either way and prefer the lower tier (k8s: least important top victim (-3, 0) <
#   (-2, 0); Slurm: tier 3 comes first in its preemptee order), so they evict sweep for
#   4000; CP-SAT evicts dev for 40 and places prod on n1[0-3].
# "fewest": n1 holds one tier-3 8-GPU job (restore 1000: 8000), n2 two 4-GPU ones
#   (restore 100: 400 each). Both baselines pick the node with the fewest victims (n1,
#   8000); CP-SAT evicts s1 + s2 for 800 (cost, item 4, before count, item 5).
BASELINE_STORIES = {
    "tier": (
        [node("n1"), node("n2")],
        [run("keep1", 1, {"n1": HIGH4}), run("dev", 2, {"n1": LOW4}, restore=10),
         run("keep2", 1, {"n2": HIGH4}), run("sweep", 3, {"n2": LOW4}, restore=1000),
         pend("prod", 1, 4)],
        {"dev": 40.0}, {"prod": {"n1": LOW4}}, {"sweep"}, 4000.0),
    "fewest": (
        [node("n1"), node("n2")],
        [run("big", 3, {"n1": ALL8}, restore=1000), run("s1", 3, {"n2": LOW4}),
         run("s2", 3, {"n2": HIGH4}), pend("prod", 1, 8)],
        {"s1": 400.0, "s2": 400.0}, {"prod": {"n2": ALL8}}, {"big"}, 8000.0),
}


@pytest.mark.parametrize("story", sorted(BASELINE_STORIES))
def test_cheapest_victims_are_not_what_baselines_pick(story: str) -> None:
    nodes, jobs, victims, where, baseline_victims, baseline_cost = BASELINE_STORIES[story]
    data = snap(nodes, jobs)
    p = solve(data)
    cost = sum(victims.values())
    check(p, evictions={v: ev(["prod"], 60, c) for v, c in victims.items()},
          placements={"prod": at(60, **where["prod"])}, deferred={},
          objective=obj(t1=sum(len(g) for g in where["prod"].values()), cost=cost,
                        evictions=len(victims)))
    for name in ("k8s", "slurm"):
        b = solve(data, planner=name)
        assert {e["job"] for e in b["evictions"]} == baseline_victims, name
        assert b["objective"]["eviction_cost_gpu_s"] == pytest.approx(baseline_cost), name
        assert [q["job"] for q in b["placements"]] == ["prod"], name
        assert p["objective"]["eviction_cost_gpu_s"] < b["objective"]["eviction_cost_gpu_s"]


# ---------------------------------------------------------------- R3: NVLink


def _pairs_node() -> tuple[list[dict], list[dict]]:
    # p1 islands [0,1] [2,3] [4,5] [6,7]; GPUs 1 and 2 free but in different islands.
    # a0 (GPU 0, cost 50), a3 (GPU 3, cost 100), b45 and b67 (2 GPUs, restore 1000: 2000).
    nodes = [node("p1", nvlink=[[0, 1], [2, 3], [4, 5], [6, 7]])]
    jobs = [run("a0", 3, {"p1": [0]}, restore=50), run("a3", 3, {"p1": [3]}, restore=100),
            run("b45", 3, {"p1": [4, 5]}, restore=1000),
            run("b67", 3, {"p1": [6, 7]}, restore=1000)]
    return nodes, jobs


def test_nvlink_pair_needs_one_island() -> None:
    # An NVLink 2-GPU job cannot take the free GPUs 1 + 2 (not linked): the cheapest way
    # to a whole island is evicting a0 (50) for [0,1] (a3 for [2,3] would cost 100).
    nodes, jobs = _pairs_node()
    p = solve(snap(nodes, [*jobs, pend("pair", 1, 2)]))
    check(p, evictions={"a0": ev(["pair"], 60, 50.0)}, placements={"pair": at(60, p1=[0, 1])},
          deferred={}, objective=obj(t1=2, cost=50.0, evictions=1))


def test_topology_any_uses_unlinked_free_gpus() -> None:
    # The same node, but the job says topology "any": GPUs 1 + 2 are free, nothing evicted.
    nodes, jobs = _pairs_node()
    p = solve(snap(nodes, [*jobs, pend("loose", 1, 2, topology="any")]))
    check(p, evictions={}, placements={"loose": at(0, p1=[1, 2])}, deferred={},
          objective=obj(t1=2))


@pytest.mark.parametrize("story", ["free-linked", "free-unlinked"])
def test_nvlink_edges(story: str) -> None:
    # e1: a 4-GPU path 0-1-2-3 given as explicit edges (the status may be "feasible":
    # connected sets across the path's cliques are not proven optimal by the model).
    # free-linked: x0 on 0, x3 on 3; free 1-2 are linked -> [1,2], no eviction.
    # free-unlinked: x1 on 1 (cost 100), x3 on 3 (cost 30); free 0 and 2 are not linked.
    #   Evicting x1 gives a connected pair ({0,1} or {1,2}) for 100, evicting x3 gives
    #   {2,3} for 30: evict x3, place on [2,3].
    nodes = [node("e1", 4, nvlink={"edges": [[0, 1], [1, 2], [2, 3]]})]
    either = ("optimal", "feasible")
    if story == "free-linked":
        jobs = [run("x0", 3, {"e1": [0]}), run("x3", 3, {"e1": [3]}), pend("pair", 1, 2)]
        p = solve(snap(nodes, jobs))
        check(p, evictions={}, placements={"pair": at(0, e1=[1, 2])}, deferred={},
              objective=obj(t1=2), status=either)
    else:
        jobs = [run("x1", 3, {"e1": [1]}), run("x3", 3, {"e1": [3]}, restore=30),
                pend("pair", 1, 2)]
        p = solve(snap(nodes, jobs))
        check(p, evictions={"x3": ev(["pair"], 60, 30.0)},
              placements={"pair": at(60, e1=[2, 3])}, deferred={},
              objective=obj(t1=2, cost=30.0, evictions=1), status=either)


# (same_block, same_nvlink_domain) -> expected nodes, victims (or None: NO_FIT)
# a1 (block A, domain d1) and b1 (B, d2) are free; a2 (A, d2) holds cheap (tier 3,
# 8 x 100 = 800), b2 (B, d1) holds dear (8 x 1000 = 8000). A 2 x 8 tier-1 gang:
# - no constraint: a1 + b1, free, no eviction;
# - same_block: A = a1 + a2 (800) or B = b1 + b2 (8000) -> a1 + a2, evict cheap;
# - same_nvlink_domain: d1 = a1 + b2 (8000) or d2 = a2 + b1 (800) -> a2 + b1;
# - both: every (block, domain) group has one node -> NO_FIT.
GROUPS = {
    (False, False): (["a1", "b1"], {}),
    (True, False): (["a1", "a2"], {"cheap": 800.0}),
    (False, True): (["a2", "b1"], {"cheap": 800.0}),
    (True, True): (None, {}),
}


@pytest.mark.parametrize("same_block,same_domain", sorted(GROUPS))
def test_same_block_domain(same_block: bool, same_domain: bool) -> None:
    nodes = [node("a1", block="A", nvlink_domain="d1"), node("a2", block="A", nvlink_domain="d2"),
             node("b1", block="B", nvlink_domain="d2"), node("b2", block="B", nvlink_domain="d1")]
    jobs = [run("cheap", 3, {"a2": ALL8}), run("dear", 3, {"b2": ALL8}, restore=1000),
            pend("gang", 1, 8, nodes=2, same_block=same_block,
                 same_nvlink_domain=same_domain, priority=3)]
    p = solve(snap(nodes, jobs))
    where, victims = GROUPS[(same_block, same_domain)]
    if where is None:
        check(p, evictions={}, placements={}, deferred={"gang": "NO_FIT"}, objective=obj())
        return
    start = 60 if victims else 0
    cost = sum(victims.values())
    check(p, evictions={v: ev(["gang"], 60, c) for v, c in victims.items()},
          placements={"gang": at(start, **{n: ALL8 for n in where})}, deferred={},
          objective=obj(t1=16, prio=48, cost=cost, evictions=len(victims)))


# ---------------------------------------------------------------- R2: gangs


def test_gang_whole_nodes_from_one_gpu_jobs() -> None:
    # Six 4-GPU nodes g1-g6, each full of four 1-GPU tier-3 jobs. g3's job g3-0 started
    # 15 min ago (immune, R6), so g3 cannot be emptied; g5's jobs cost 300 each, the
    # others 100. A 4 x 4 tier-1 gang (priority 5) needs four whole nodes: g1, g2, g4, g6,
    # 16 evictions, 1600 GPU-s; priority value 5 x 16 = 80.
    nodes = [node(f"g{i}", 4) for i in range(1, 7)]
    jobs = []
    for i in range(1, 7):
        for k in range(4):
            jobs.append(run(f"g{i}-{k}", 3, {f"g{i}": [k]}, restore=300 if i == 5 else 100,
                            started="2026-11-30T07:45:00Z" if (i, k) == (3, 0) else OLD))
    jobs.append(pend("gang", 1, 4, nodes=4, priority=5))
    p = solve(snap(nodes, jobs))
    chosen = ["g1", "g2", "g4", "g6"]
    check(p, evictions={f"{n}-{k}": ev(["gang"], 60, 100.0) for n in chosen for k in range(4)},
          placements={"gang": at(60, **{n: LOW4 for n in chosen})}, deferred={},
          objective=obj(t1=16, prio=80, cost=1600.0, evictions=16))


@pytest.mark.parametrize("order", ["fast-first", "slow-first"])
def test_gang_victim_storage_of_first_node(order: str) -> None:
    # A 2-node tier-3 victim (8 GPUs per node, 80 GB, barrier 30 s) on n1 (fs-a,
    # 40 GB/s, local 4 GB/s) and n2 (fs-b, 1 GB/s, local 8 GB/s). Its storage is that of
    # its first placement node (section 7). shard = 40 GB: local term max(40/4, 40/8) = 10.
    # fast-first (n1 first): F(fs-a) = 80 -> 2 s; flush = max(2, 10) = 10;
    #   need = max(60, 2 x (10 + 30)) = 80 -> grace 80; cost = 16 x (100 + 10) = 1760;
    #   hold 08:00 + 80 + 1800 = 08:31:20. Evicting it frees both nodes (R2) for the
    #   2 x 8 tier-1 gang, which starts after 80 s.
    # slow-first (n2 first): F(fs-b) = 80 -> 80 s; need 2 x (80 + 30) = 220 > 180: protected
    #   by R11, the gang waits with STORM.
    nodes = [node("n1", storage="fs-a", local_write_gb_per_s=4.0),
             node("n2", storage="fs-b", local_write_gb_per_s=8.0)]
    where = {"n1": ALL8, "n2": ALL8} if order == "fast-first" else {"n2": ALL8, "n1": ALL8}
    jobs = [run("g3", 3, where, ck={"size_gb": 80, "barrier_s": 30}),
            pend("big", 1, 8, nodes=2)]
    storage = [{"id": "fs-a", "write_gb_per_s": 40.0}, {"id": "fs-b", "write_gb_per_s": 1.0}]
    p = solve(snap(nodes, jobs, storage=storage))
    if order == "fast-first":
        check(p, evictions={"g3": ev(["big"], 80, 1760.0, 10.0, "2026-11-30T08:31:20Z")},
              placements={"big": at(80, n1=ALL8, n2=ALL8)}, deferred={},
              objective=obj(t1=16, cost=1760.0, evictions=1), storm=[("fs-a", 80.0, 2.0)])
    else:
        check(p, evictions={}, placements={}, deferred={"big": "STORM"}, objective=obj())


# ---------------------------------------------------------------- R5/R7: rights


@pytest.mark.parametrize("tier", [1, 2, 3])
def test_equal_tiers_never_preempt_each_other(tier: int) -> None:
    # A tier-t job waits for a node held by another tier-t job: tier 1 is not preemptible
    # (R5), tiers 2 and 3 may not preempt their own tier (R7). Nothing evicted: PROTECTED.
    p = solve(snap([node("n1")], [run("holder", tier, {"n1": ALL8}), pend("want", tier, 8)]))
    check(p, evictions={}, placements={}, deferred={"want": "PROTECTED"}, objective=obj())
    assert "holder" in deferred_entry(p, "want")["detail"]


def test_rights_of_freed_gpus() -> None:
    # n1 holds tier-2 mid (8 x 100 = 800), n2 tier-3 low (8 x 1000 = 8000). Tier-1 prod and
    # tier-2 ft want 4 GPUs each. Evicting mid for prod would leave 4 GPUs ft may not use
    # (freed by a tier-2 victim, R7), so both would cost 800 + 8000. Evicting only low lets
    # both share n2: tier 1 = 4, tier 2 = 4, cost 8000, one eviction.
    nodes = [node("n1"), node("n2")]
    jobs = [run("mid", 2, {"n1": ALL8}), run("low", 3, {"n2": ALL8}, restore=1000),
            pend("prod", 1, 4, topology="any"), pend("ft", 2, 4, topology="any")]
    p = solve(snap(nodes, jobs))
    check(p, evictions={"low": ev(["ft", "prod"], 60, 8000.0)},
          placements={"prod": at(60, n2=None), "ft": at(60, n2=None)}, deferred={},
          objective=obj(t1=4, t2=4, cost=8000.0, evictions=1))
    assert sorted(nodes_of(p, "prod")["n2"] + nodes_of(p, "ft")["n2"]) == ALL8


# ---------------------------------------------------------------- R6: immunity


@pytest.mark.parametrize("tier,started,evictable", [
    (3, "2026-11-30T07:30:00Z", True),  # exactly 1800 s old: evictable
    (3, "2026-11-30T07:30:01Z", False),  # 1799 s: immune
    (2, "2026-11-30T07:00:00Z", True),  # exactly 3600 s
    (2, "2026-11-30T07:00:01Z", False),
])
def test_immunity_boundary(tier: int, started: str, evictable: bool) -> None:
    # R6 holds while now - started_at < min_runtime_s (tier 3: 1800, tier 2: 3600).
    # Victim cost 8 x 100 = 800.
    p = solve(snap([node("n1")], [run("young", tier, {"n1": ALL8}, started=started),
                                  pend("t1", 1, 8)]))
    if evictable:
        check(p, evictions={"young": ev(["t1"], 60, 800.0)},
              placements={"t1": at(60, n1=ALL8)}, deferred={},
              objective=obj(t1=8, cost=800.0, evictions=1))
    else:
        check(p, evictions={}, placements={}, deferred={"t1": "PROTECTED"}, objective=obj())
        assert "R6" in deferred_entry(p, "t1")["detail"]


# ---------------------------------------------------------------- R8: windows


@pytest.mark.parametrize("window,inside", [
    ({"days": ["mon"], "start": "06:00", "end": "09:00"}, True),
    ({"days": ["sun"], "start": "22:00", "end": "09:00"}, True),  # Sunday's wrap into Monday
    ({"days": ["mon"], "start": "22:00", "end": "09:00"}, False),  # Monday's starts at 22:00
    ({"days": ["mon"], "start": "06:00", "end": "08:00"}, False),  # [start, end): 08:00 out
    ({"days": ["mon"], "start": "08:00", "end": "08:00"}, True),  # start == end: all day
    ({"start": "07:59", "end": "08:01"}, True),  # no days: every day
    ({"days": ["tue"], "start": "00:00", "end": "24:00"}, False),
    ({"days": ["mon"], "start": "00:00", "end": "24:00"}, True),
])
def test_tier2_window(window: dict[str, Any], inside: bool) -> None:
    # now = Monday 08:00Z. Tier-2 night (8 GPUs, 4 h old, cost 800) is preemptible only
    # inside its window (R8); inside, tier-1 prod takes its node, outside it is PROTECTED.
    policy = {"tiers": {"2": {"windows": [window]}}}
    p = solve(snap([node("n1")], [run("night", 2, {"n1": ALL8}), pend("prod", 1, 8)], policy))
    if inside:
        check(p, evictions={"night": ev(["prod"], 60, 800.0)},
              placements={"prod": at(60, n1=ALL8)}, deferred={},
              objective=obj(t1=8, cost=800.0, evictions=1))
    else:
        check(p, evictions={}, placements={}, deferred={"prod": "PROTECTED"}, objective=obj())
        assert "R8" in deferred_entry(p, "prod")["detail"]


# ---------------------------------------------------------------- R4: pools, R1: types


def test_pools() -> None:
    # Pool reserved admits tier 1 only. r1 (H100) and r2 (A100) are reserved and free;
    # d1 (default) holds tier-3 spot (800). Tier-2 ft may not use r1/r2 (R4), so it evicts
    # spot on d1; tier-1 prod (H100) takes the free r1; tier-3 nb (A100) could only go to
    # r2, which does not admit tier 3: NO_FIT.
    nodes = [node("r1", gpu_type="H100", pool="reserved"),
             node("r2", gpu_type="A100", pool="reserved"),
             node("d1", gpu_type="H100")]
    # nb2 has nb's shape and tier, nb-t2 its shape at tier 2: NO_FIT too, each sentence
    # naming its own tier (they are shared per shape and tier).
    jobs = [run("spot", 3, {"d1": ALL8}), pend("ft", 2, 8), pend("prod", 1, 8, gpu_type="H100"),
            pend("nb", 3, 4, gpu_type="A100"), pend("nb2", 3, 4, gpu_type="A100"),
            pend("nb-t2", 2, 4, gpu_type="A100")]
    p = solve(snap(nodes, jobs, {"pools": {"reserved": [1]}}))
    check(p, evictions={"spot": ev(["ft"], 60, 800.0)},
          placements={"ft": at(60, d1=ALL8), "prod": at(0, r1=ALL8)},
          deferred={"nb": "NO_FIT", "nb2": "NO_FIT", "nb-t2": "NO_FIT"},
          objective=obj(t1=8, t2=8, cost=800.0, evictions=1))
    for jid, tier in (("nb", 3), ("nb2", 3), ("nb-t2", 2)):
        assert deferred_entry(p, jid)["detail"] == (
            f"needs 4 GPUs (A100, NVLink); no up node of that type is in a pool admitting "
            f"tier {tier}, even if empty (R1-R4)")


def test_gpu_type_and_no_fit() -> None:
    # a1 (A100) is free; h1 (H100) holds tier-3 spot (800); pc is a 4-GPU L4 box without
    # NVLink. Tier-1 h100 (gpu_type H100) must evict spot rather than use a1 (R1); tier-3
    # anyjob (untyped) takes a1; tier-3 l4-any (topology any) takes 2 GPUs of pc.
    # NO_FIT: b200 (no B200 node), huge (16 GPUs per node), l4-pair (2 NVLink GPUs on a
    # node without NVLink, section 7), blk (same_block, but no node has a block).
    nodes = [node("a1", gpu_type="A100"), node("h1", gpu_type="H100"),
             node("pc", 4, gpu_type="L4", nvlink="none")]
    jobs = [run("spot", 3, {"h1": ALL8}), pend("h100", 1, 8, gpu_type="H100"),
            pend("anyjob", 3, 8), pend("l4-any", 3, 2, gpu_type="L4", topology="any"),
            pend("b200", 1, 1, gpu_type="B200"), pend("huge", 1, 16),
            pend("l4-pair", 3, 2, gpu_type="L4"), pend("blk", 3, 1, same_block=True)]
    p = solve(snap(nodes, jobs))
    check(p, evictions={"spot": ev(["h100"], 60, 800.0)},
          placements={"h100": at(60, h1=ALL8), "anyjob": at(0, a1=ALL8),
                      "l4-any": at(0, pc=None)},
          deferred={"b200": "NO_FIT", "huge": "NO_FIT", "l4-pair": "NO_FIT", "blk": "NO_FIT"},
          objective=obj(t1=8, t3=10, cost=800.0, evictions=1))
    assert len(nodes_of(p, "l4-any")["pc"]) == 2


# ---------------------------------------------------------------- node states


def test_drain_and_down() -> None:
    # u1 holds tier-3 big (8 x 300 = 2400). dr is draining: 4 free GPUs and tier-3 dr-job
    # (4 x 10 = 40) -- its GPUs take no placement, free or freed. dn is down: tier-3 lost
    # spans dn and u2 (cost 16 x 1 = 16, the cheapest) but is never a victim, keeps u2,
    # and is named in warnings. Tier-1 t1 (8 GPUs) must evict big on u1. Tier-3 nb
    # (4 GPUs) could only go to u1 or u2, held by tier-3 jobs it may not preempt: PROTECTED.
    nodes = [node("u1"), node("dr", state="drain"), node("dn", state="down"), node("u2")]
    jobs = [run("big", 3, {"u1": ALL8}, restore=300), run("dr-job", 3, {"dr": LOW4}, restore=10),
            run("lost", 3, {"dn": ALL8, "u2": ALL8}, restore=1), pend("t1", 1, 8),
            pend("nb", 3, 4)]
    p = solve(snap(nodes, jobs))
    check(p, evictions={"big": ev(["t1"], 60, 2400.0)}, placements={"t1": at(60, u1=ALL8)},
          deferred={"nb": "PROTECTED"}, objective=obj(t1=8, cost=2400.0, evictions=1),
          warnings=1)
    assert "lost" in p["warnings"][0]


def test_protected_names_the_closest_nodes() -> None:
    # Tier-2 want (8 GPUs) may evict tier 3 only. n1: tier-3 cheap on 0-3, tier-2 mid on
    # 4-5, 6-7 free: 2 free + 4 it may evict = 6 GPUs. n2: tier-2 peer on 0-3, 4-7 free: 4.
    # n3: tier-1 top, 0. No node reaches 8, so nothing is evicted (PROTECTED), and the
    # closest nodes are n1 (6) then n2 (4), though n2 has more free GPUs. Their protected
    # jobs are mid and peer (same tier, R7); cheap is not a blocker.
    jobs = [run("cheap", 3, {"n1": LOW4}), run("mid", 2, {"n1": [4, 5]}),
            run("peer", 2, {"n2": LOW4}), run("top", 1, {"n3": ALL8}), pend("want", 2, 8)]
    p = solve(snap([node("n1"), node("n2"), node("n3")], jobs))
    check(p, evictions={}, placements={}, deferred={"want": "PROTECTED"}, objective=obj())
    assert deferred_entry(p, "want")["detail"] == (
        "needs 8 GPUs (NVLink); n1 and n2 could free them only by evicting tier-2 jobs mid "
        "and peer, tier 2 may not preempt tier 2 (R7)")


def test_outranked_names_who_took_the_free_gpus() -> None:
    # Two free nodes, n1 (H100) and n2 (H200). Tier-1 a (8 GPUs, H100) can only go to n1,
    # tier-1 b (8, H200) only to n2; tier-2 c (8, any type) fits either one, but tier 1
    # goes first: c waits (OUTRANKED), and the sentence says who has each node.
    nodes = [node("n1", gpu_type="H100"), node("n2", gpu_type="H200")]
    jobs = [pend("a", 1, 8, gpu_type="H100"), pend("b", 1, 8, gpu_type="H200"),
            pend("c", 2, 8)]
    p = solve(snap(nodes, jobs))
    check(p, evictions={}, placements={"a": at(0, n1=ALL8), "b": at(0, n2=ALL8)},
          deferred={"c": "OUTRANKED"}, objective=obj(t1=16))
    assert deferred_entry(p, "c")["detail"] == (
        "needs 8 GPUs (NVLink); the free GPUs that could hold it went to more valuable jobs: "
        "on n1 to tier-1 job a; on n2 to tier-1 job b")
    # a tier-1 gang on both nodes instead: one entry names both nodes
    jobs = [pend("g", 1, 8, nodes=2), pend("c", 2, 8)]
    p = solve(snap([node("n1"), node("n2")], jobs))
    check(p, evictions={}, placements={"g": at(0, n1=ALL8, n2=ALL8)},
          deferred={"c": "OUTRANKED"}, objective=obj(t1=16))
    assert deferred_entry(p, "c")["detail"] == (
        "needs 8 GPUs (NVLink); the free GPUs that could hold it went to more valuable jobs: "
        "on n1 and n2 to tier-1 job g")
    # one node: tier-1 a and tier-2 b (4 GPUs each) fill n1, so tier-3 c (8) waits, and
    # its sentence names both, by tier
    jobs = [pend("a", 1, 4), pend("b", 2, 4), pend("c", 3, 8)]
    p = solve(snap([node("n1")], jobs))
    check(p, evictions={}, placements={"a": at(0, n1=None), "b": at(0, n1=None)},
          deferred={"c": "OUTRANKED"}, objective=obj(t1=4, t2=4))
    assert deferred_entry(p, "c")["detail"] == (
        "needs 8 GPUs (NVLink); the free GPUs that could hold it went to more valuable jobs: "
        "on n1 to tier-1 job a and tier-2 job b")


def test_outranked_names_who_took_the_gpus_it_could_free() -> None:
    # n1 holds tier-3 s (8 x 100 = 800). Tier-1 a (priority 50) and b (priority 10) both
    # need n1's 8 GPUs by evicting s; a wins on priority (item 3), b waits: OUTRANKED, and
    # the sentence names who has the GPUs b could have freed.
    jobs = [run("s", 3, {"n1": ALL8}), pend("a", 1, 8, priority=50), pend("b", 1, 8, priority=10)]
    p = solve(snap([node("n1")], jobs))
    check(p, evictions={"s": ev(["a"], 60, 800.0)}, placements={"a": at(60, n1=ALL8)},
          deferred={"b": "OUTRANKED"}, objective=obj(t1=8, prio=400, cost=800.0, evictions=1))
    assert deferred_entry(p, "b")["detail"] == (
        "needs 8 GPUs (NVLink); the GPUs it could free went to more valuable jobs: on n1 to "
        "tier-1 job a")


def test_protected_gang_names_the_closest_block() -> None:
    # Tier-2 gang (3 nodes x 8 GPUs, one block). Block A: a1 and a2 free, a3 held by
    # tier-1 t1 (R5). Block B: b1 free, b2 and b3 held by tier-2 p2 and p3 (R7). A has 2 of
    # the 3 nodes, B 1: PROTECTED, block A comes closest, and a3 is what keeps the third.
    nodes = [node("a1", block="A"), node("a2", block="A"), node("a3", block="A"),
             node("b1", block="B"), node("b2", block="B"), node("b3", block="B")]
    jobs = [run("t1", 1, {"a3": ALL8}), run("p2", 2, {"b2": ALL8}), run("p3", 2, {"b3": ALL8}),
            pend("gang", 2, 8, nodes=3, same_block=True)]
    p = solve(snap(nodes, jobs))
    check(p, evictions={}, placements={}, deferred={"gang": "PROTECTED"}, objective=obj())
    assert deferred_entry(p, "gang")["detail"] == (
        "needs 3 nodes x 8 GPUs (NVLink, one block); block A comes closest: 2 of the 3 nodes "
        "it needs are free or could be freed; the next closest, a3, could free theirs only by "
        "evicting tier-1 job t1, tier 1 is not preemptible (R5)")


# ---------------------------------------------------------------- R12: victims without a signal


# Policy grace min_s 45. Three victims of 4 GPUs on n1-n3 (the other halves tier 1):
# nosig-a: no signal, last checkpoint 07:30 -> lost 1800, restore 100: 4 x 1900 = 7600;
# nosig-b: no signal, no checkpoint, started 07:20 -> lost 2400, restore 0: 4 x 2400 = 9600;
# sig-c: signal, 40 GB to fs at 10 GB/s -> solo flush 4, restore 2000: 4 x 2004 = 8016,
#   need max(45, 2 x 4) = 45.
# A signal-less victim gets exactly grace min_s = 45, flush 0, no storm entry; hold
# 08:00 + 45 + 1800 = 08:30:45.
NOSIG = {
    "all": (["nosig-a", "nosig-b", "sig-c"], "nosig-a", 7600.0),
    "b-or-c": (["nosig-b", "sig-c"], "sig-c", 8016.0),
    "b-only": (["nosig-b"], "nosig-b", 9600.0),
}


@pytest.mark.parametrize("story", sorted(NOSIG))
def test_victim_without_signal(story: str) -> None:
    present, victim, cost = NOSIG[story]
    spec: dict[str, tuple[str, dict[str, Any], float, str]] = {
        "nosig-a": ("n1", {"signal": None, "last_at": "2026-11-30T07:30:00Z"}, 100, OLD),
        "nosig-b": ("n2", {"signal": None}, 0, "2026-11-30T07:20:00Z"),
        "sig-c": ("n3", {"size_gb": 40}, 2000, OLD)}
    nodes: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for jid in present:
        n, ck, restore, started = spec[jid]
        nodes.append(node(n))
        jobs += [run(f"keep-{n}", 1, {n: HIGH4}),
                 run(jid, 3, {n: LOW4}, restore=restore, ck=ck, started=started)]
    jobs.append(pend("t1", 1, 4))
    p = solve(snap(nodes, jobs, {"grace": {"min_s": 45}},
                   storage=[{"id": "fs", "write_gb_per_s": 10.0}]))
    signal = "SIGTERM" if victim == "sig-c" else None
    flush = 4.0 if victim == "sig-c" else 0.0
    check(p, evictions={victim: ev(["t1"], 45, cost, flush, "2026-11-30T08:30:45Z", signal)},
          placements={"t1": at(45, **{spec[victim][0]: LOW4})}, deferred={},
          objective=obj(t1=4, cost=cost, evictions=1),
          storm=[("fs", 40.0, 4.0)] if victim == "sig-c" else [])


# ---------------------------------------------------------------- R13: budgets


def test_budget_max_evictions_per_tick() -> None:
    # One eviction per tick; tier-1 hi (priority 9) and lo (1) each need a whole node:
    # n1's e1 (8 x 50 = 400) or n2's e2 (8 x 100 = 800). One job gets in: hi (72 > 8),
    # on the cheaper n1; lo is deferred BUDGET.
    nodes = [node("n1"), node("n2")]
    jobs = [run("e1", 3, {"n1": ALL8}, restore=50), run("e2", 3, {"n2": ALL8}),
            pend("hi", 1, 8, priority=9), pend("lo", 1, 8, priority=1)]
    p = solve(snap(nodes, jobs, {"max_evictions_per_tick": 1}))
    check(p, evictions={"e1": ev(["hi"], 60, 400.0)}, placements={"hi": at(60, n1=ALL8)},
          deferred={"lo": "BUDGET"}, objective=obj(t1=8, prio=72, cost=400.0, evictions=1))


def test_budget_zero_evictions() -> None:
    # max_evictions_per_tick 0 forbids evictions: both tier-1 jobs need one, so both
    # wait with BUDGET and nothing is evicted.
    nodes = [node("n1"), node("n2")]
    jobs = [run("e1", 3, {"n1": ALL8}, restore=50), run("e2", 3, {"n2": ALL8}),
            pend("hi", 1, 8, priority=9), pend("lo", 1, 8, priority=1)]
    p = solve(snap(nodes, jobs, {"max_evictions_per_tick": 0}))
    check(p, evictions={}, placements={}, deferred={"hi": "BUDGET", "lo": "BUDGET"},
          objective=obj())


def test_budget_evicted_gpu_fraction() -> None:
    # GPUs on up and drain nodes: n1, n2, d1 = 24 (down x1 does not count); fraction 0.5
    # -> at most 12 GPUs evicted, three 4-GPU victims (counting x1 would allow four,
    # leaving out d1 only two). Victims v1-v4 cost 4 x 25/50/75/100 = 100/200/300/400.
    # Tier-1 a, b, c, d (4 GPUs, priorities 4..1): a, b, c get v1, v2, v3's GPUs
    # (priority 4 x 9 = 36, cost 600); d is deferred BUDGET.
    nodes = [node("n1"), node("n2"), node("d1", state="drain"), node("x1", state="down")]
    jobs = [run("v1", 3, {"n1": LOW4}, restore=25), run("v2", 3, {"n1": HIGH4}, restore=50),
            run("v3", 3, {"n2": LOW4}, restore=75), run("v4", 3, {"n2": HIGH4}, restore=100)]
    jobs += [pend(j, 1, 4, priority=k) for j, k in (("a", 4), ("b", 3), ("c", 2), ("d", 1))]
    p = solve(snap(nodes, jobs, {"max_evicted_gpu_fraction": 0.5}))
    users = {}
    for j in ("a", "b", "c"):
        ((n, gpus),) = nodes_of(p, j).items()
        users[(n, tuple(gpus))] = j
    assert sorted(users) == [("n1", (0, 1, 2, 3)), ("n1", (4, 5, 6, 7)), ("n2", (0, 1, 2, 3))]
    check(p, evictions={"v1": ev([users[("n1", (0, 1, 2, 3))]], 60, 100.0),
                        "v2": ev([users[("n1", (4, 5, 6, 7))]], 60, 200.0),
                        "v3": ev([users[("n2", (0, 1, 2, 3))]], 60, 300.0)},
          placements={j: at(60, **{n: list(g)}) for (n, g), j in users.items()},
          deferred={"d": "BUDGET"}, objective=obj(t1=12, prio=36, cost=600.0, evictions=3))


# ---------------------------------------------------------------- R9: backoff


def test_backoff() -> None:
    # Default backoff: cooldown(k) = 1800 for k <= 3, else min(28800, 1800 x 2^(k-3)).
    # k2: 2 preemptions, last 07:30 -> until 08:00 = now: placeable (now >= until).
    # k5: 5, last 06:00 -> 7200 s -> until 08:00: placeable.
    # k4: 4, last 07:30 -> 3600 s -> until 08:30: COOLDOWN.
    # k9: 9, last 00:00:01 -> min(28800, 1800 x 64) = 28800 s -> until 08:00:01: COOLDOWN.
    # Tier-1 t1 (8 GPUs) could take the free n1, but then no tier-3 job fits: tier 3
    # counts after tier 1, so t1 evicts v on n2 (800) and k2 + k5 share n1.
    # v was preempted 3 times: hold = 08:00 + 60 + cooldown(4) 3600 = 09:01:00.
    nodes = [node("n1"), node("n2")]
    jobs = [run("v", 3, {"n2": ALL8}, preemptions=3,
                last_preempted_at="2026-11-29T08:00:00Z"),
            pend("t1", 1, 8),
            pend("k2", 3, 4, preemptions=2, last_preempted_at="2026-11-30T07:30:00Z"),
            pend("k5", 3, 4, preemptions=5, last_preempted_at="2026-11-30T06:00:00Z"),
            pend("k4", 3, 4, preemptions=4, last_preempted_at="2026-11-30T07:30:00Z"),
            pend("k9", 3, 4, preemptions=9, last_preempted_at="2026-11-30T00:00:01Z")]
    p = solve(snap(nodes, jobs))
    check(p, evictions={"v": ev(["t1"], 60, 800.0, hold="2026-11-30T09:01:00Z")},
          placements={"t1": at(60, n2=ALL8), "k2": at(0, n1=None), "k5": at(0, n1=None)},
          deferred={"k4": "COOLDOWN", "k9": "COOLDOWN"},
          objective=obj(t1=8, t3=8, cost=800.0, evictions=1))
    assert sorted(nodes_of(p, "k2")["n1"] + nodes_of(p, "k5")["n1"]) == ALL8
    assert deferred_entry(p, "k4")["until"] == "2026-11-30T08:30:00Z"
    assert deferred_entry(p, "k9")["until"] == "2026-11-30T08:00:01Z"


# ---------------------------------------------------------------- R10: cascade guard


def test_cascade_guard() -> None:
    # cascade_guard_s 600, cooldown_s 120 (every hold below is over). ok was preempted
    # exactly 600 s ago (not guarded: the guard holds while < 600), req 599 s ago
    # (guarded: free GPUs only). n1's v1 costs 400, n2's v2 800, n3 has 4 free GPUs and
    # v3 (4 x 1000 = 4000). ok (tier 1, priority 2) evicts v1; req (8 GPUs) finds no
    # 8 free GPUs: CASCADE_GUARD; tier-2 small, guarded too, fits n3's free GPUs.
    nodes = [node("n1"), node("n2"), node("n3")]
    jobs = [run("v1", 3, {"n1": ALL8}, restore=50), run("v2", 3, {"n2": ALL8}),
            run("v3", 3, {"n3": LOW4}, restore=1000),
            pend("ok", 1, 8, priority=2, preemptions=1, last_preempted_at="2026-11-30T07:50:00Z"),
            pend("req", 1, 8, priority=1, preemptions=1,
                 last_preempted_at="2026-11-30T07:50:01Z"),
            pend("small", 2, 4, preemptions=1, last_preempted_at="2026-11-30T07:55:00Z")]
    policy = {"cascade_guard_s": 600, "backoff": {"cooldown_s": 120}}
    p = solve(snap(nodes, jobs, policy))
    check(p, evictions={"v1": ev(["ok"], 60, 400.0, hold="2026-11-30T08:03:00Z")},
          placements={"ok": at(60, n1=ALL8), "small": at(0, n3=HIGH4)},
          deferred={"req": "CASCADE_GUARD"}, objective=obj(t1=8, t2=4, prio=16, cost=400.0,
                                                           evictions=1))


# ---------------------------------------------------------------- objective tie-breaks


def test_priority_tie_break_and_outranked() -> None:
    # One free 8-GPU node. Tier-1 choices: A (8 GPUs, priority 1), B + C (4 + 4, priority
    # 10 each), D (6 GPUs, priority 100; nothing fills the other 2). Item 1: 8 GPUs beats
    # D's 6; item 3: B + C (80) beats A (8). Tier-2 T2 (priority 1000) comes after tier 1.
    # A, D and T2 are OUTRANKED.
    jobs = [pend("A", 1, 8, priority=1), pend("B", 1, 4, priority=10),
            pend("C", 1, 4, priority=10), pend("D", 1, 6, priority=100),
            pend("T2", 2, 8, priority=1000)]
    p = solve(snap([node("n1")], jobs))
    check(p, evictions={}, placements={"B": at(0, n1=None), "C": at(0, n1=None)},
          deferred={"A": "OUTRANKED", "D": "OUTRANKED", "T2": "OUTRANKED"},
          objective=obj(t1=8, prio=80))
    assert sorted(nodes_of(p, "B")["n1"] + nodes_of(p, "C")["n1"]) == ALL8


def test_negative_priorities() -> None:
    # Tier-3 jobs on a free 8-GPU node: neg (4 GPUs, priority -5), pos (4, priority 1),
    # neg2 (8, priority -50). Every choice that fills the node admits 8 tier-3 GPUs
    # (item 2); item 3 then compares 4 x (-5) + 4 x 1 = -16 with 8 x (-50) = -400:
    # neg + pos, and neg2 is OUTRANKED. Admitting fewer GPUs to avoid a negative
    # priority is never better (item 2 first).
    jobs = [pend("neg", 3, 4, priority=-5, topology="any"),
            pend("pos", 3, 4, priority=1, topology="any"), pend("neg2", 3, 8, priority=-50)]
    p = solve(snap([node("n1")], jobs))
    check(p, evictions={}, placements={"neg": at(0, n1=None), "pos": at(0, n1=None)},
          deferred={"neg2": "OUTRANKED"}, objective=obj(t3=8, prio=-16))


def test_eviction_count_tie_break() -> None:
    # Equal cost, different counts: n1's one (4 GPUs, 4 x 100 = 400) or n2's two-a + two-b
    # (2 GPUs each, 2 x 100 = 200 each, 400 together); the other halves are tier 1.
    # Item 4 ties at 400, item 5 prefers one eviction.
    nodes = [node("n1"), node("n2")]
    jobs = [run("k1", 1, {"n1": HIGH4}), run("one", 3, {"n1": LOW4}),
            run("k2", 1, {"n2": HIGH4}), run("two-a", 3, {"n2": [0, 1]}),
            run("two-b", 3, {"n2": [2, 3]}), pend("t1", 1, 4)]
    p = solve(snap(nodes, jobs))
    check(p, evictions={"one": ev(["t1"], 60, 400.0)}, placements={"t1": at(60, n1=LOW4)},
          deferred={}, objective=obj(t1=4, cost=400.0, evictions=1))


# ---------------------------------------------------------------- regressions and open bugs


def test_rights_decide_who_gets_which_freed_gpus() -> None:
    # n1: a-t3 (tier 3, GPUs 0-1, 2 x 50 = 100), b-t2 (tier 2, GPUs 2-3, 2 x 100 = 200),
    # keep (tier 1, GPUs 4-7). Tier-1 p1 may use GPUs of tiers 2 and 3, tier-2 p2 only
    # those of tier 3 (R7). Both fit only if both victims go, p2 on a-t3's [0,1] and p1
    # on b-t2's [2,3]: tier 1 = 2, tier 2 = 2, cost 300, two evictions. (Regression:
    # the GPU assignment after the solve once gave p1 a-t3's GPUs and failed.)
    nodes = [node("n1")]
    jobs = [run("a-t3", 3, {"n1": [0, 1]}, restore=50), run("b-t2", 2, {"n1": [2, 3]}),
            run("keep", 1, {"n1": HIGH4}), pend("p1", 1, 2), pend("p2", 2, 2)]
    p = solve(snap(nodes, jobs))
    check(p, evictions={"a-t3": ev(["p2"], 60, 100.0), "b-t2": ev(["p1"], 60, 200.0)},
          placements={"p1": at(60, n1=[2, 3]), "p2": at(60, n1=[0, 1])}, deferred={},
          objective=obj(t1=2, t2=2, cost=300.0, evictions=2))


def test_storm_counts_victims_with_empty_checkpoints() -> None:
    # fs at 10 GB/s, default grace (max 180, safety 2). heavy: 800 GB, alone flush 80 s,
    # need 160, cost 8 x (100 + 80) = 1440. light: signal, 0 GB, barrier 20 s: alone need
    # max(60, 2 x 20) = 60, cost 8 x 100 = 800. Both together: F = 800, light's flush_s is
    # max(800/10, 0) = 80 and its need 2 x (80 + 20) = 200 > 180 (R11/R12): only one may
    # go. Tier-1 a (priority 2) gets the cheaper light's node n2; b waits (STORM). F = 0
    # on fs, so no storm entry; light's flush_s = 0, grace 60. (Regression: victims with
    # empty checkpoints were once left out of the storm cap.)
    nodes = [node("n1"), node("n2")]
    jobs = [run("heavy", 3, {"n1": ALL8}, ck={"size_gb": 800}),
            run("light", 3, {"n2": ALL8}, ck={"size_gb": 0, "barrier_s": 20}),
            pend("a", 1, 8, priority=2), pend("b", 1, 8, priority=1)]
    p = solve(snap(nodes, jobs, storage=[{"id": "fs", "write_gb_per_s": 10.0}]))
    check(p, evictions={"light": ev(["a"], 60, 800.0)}, placements={"a": at(60, n2=ALL8)},
          deferred={"b": "STORM"}, objective=obj(t1=8, prio=16, cost=800.0, evictions=1))


@pytest.mark.parametrize("budget", [{"max_evictions_per_tick": 1},
                                    {"max_evicted_gpu_fraction": 0.25}])
def test_budget_blocks_a_gang_alone(budget: dict[str, Any]) -> None:
    # n1 and n2 each hold a tier-3 8-GPU job; d1, d2 drain (so 32 GPUs count for the
    # fraction: 0.25 -> 8 GPUs). The 2 x 8 tier-1 gang needs both victims: 2 evictions
    # > 1, 16 GPUs > 8 (R13). Nothing else competes: the reason is BUDGET. (Regression:
    # once OUTRANKED, as only budgets already used by this tick's victims counted.)
    nodes = [node("n1"), node("n2"), node("d1", state="drain"), node("d2", state="drain")]
    jobs = [run("v1", 3, {"n1": ALL8}), run("v2", 3, {"n2": ALL8}), pend("gang", 1, 8, nodes=2)]
    p = solve(snap(nodes, jobs, budget))
    check(p, evictions={}, placements={}, deferred={"gang": "BUDGET"}, objective=obj())


def test_outranked_not_storm_when_storm_limit_is_far() -> None:
    # v: 100 GB on fs at 10 GB/s: flush 10 s, need max(60, 2 x 10) = 60 (far below 180),
    # cost 8 x (100 + 10) = 880. hi (priority 9) and lo (1) both want n1's 8 GPUs: hi
    # gets them; lo lost to a more valuable job: OUTRANKED. (Regression: once STORM, as
    # soon as any storage carried a flush.)
    jobs = [run("v", 3, {"n1": ALL8}, ck={"size_gb": 100}),
            pend("hi", 1, 8, priority=9), pend("lo", 1, 8, priority=1)]
    p = solve(snap([node("n1")], jobs, storage=[{"id": "fs", "write_gb_per_s": 10.0}]))
    check(p, evictions={"v": ev(["hi"], 60, 880.0, 10.0)}, placements={"hi": at(60, n1=ALL8)},
          deferred={"lo": "OUTRANKED"}, objective=obj(t1=8, prio=72, cost=880.0, evictions=1),
          storm=[("fs", 100.0, 10.0)])


# big (tier 1, priority 9, 4 GPUs) and small (tier 1, priority 1, 2 GPUs) share n1, a
# 4-GPU NVSwitch node held by two 2-GPU tier-3 jobs; big needs both victims, small one.
# "budget": max_evictions_per_tick 1; v1 costs 2 x 50 = 100, v2 2 x 100 = 200. big
#   would need two evictions: BUDGET; small evicts v1 (cost 100) and takes [0,1].
# "storm": fs at 10 GB/s; a and b flush 500 GB each: alone F = 500, flush 50 s, need
#   2 x 50 = 100; together F = 1000, need 200 > 180 (R11). a costs 2 x (50 + 50) = 200,
#   b 2 x (100 + 50) = 300. big would need both: STORM; small evicts a (grace 100,
#   hold 08:00 + 100 + 1800 = 08:31:40).
# In both, big is blocked by a rule, not outranked: small is the less valuable job.
BLOCKED = {
    "budget": ({"max_evictions_per_tick": 1}, [], {}, "v", "BUDGET",
               ev(["small"], 60, 100.0), []),
    "storm": ({}, [{"id": "fs", "write_gb_per_s": 10.0}], {"size_gb": 500}, "a", "STORM",
              ev(["small"], 100, 200.0, 50.0, "2026-11-30T08:31:40Z"), [("fs", 500.0, 50.0)]),
}


@pytest.mark.parametrize("story", sorted(BLOCKED))
def test_blocked_job_is_not_outranked_by_a_smaller_one(story: str) -> None:
    policy, storage, ck, prefix, reason, victim, storm = BLOCKED[story]
    first, second = (f"{prefix}1", f"{prefix}2") if prefix == "v" else ("a", "b")
    jobs = [run(first, 3, {"n1": [0, 1]}, restore=50, ck=ck),
            run(second, 3, {"n1": [2, 3]}, restore=100, ck=ck),
            pend("big", 1, 4, priority=9), pend("small", 1, 2, priority=1)]
    p = solve(snap([node("n1", 4)], jobs, policy, storage=storage))
    check(p, evictions={first: victim}, placements={"small": at(victim["grace_s"], n1=[0, 1])},
          deferred={"big": reason},
          objective=obj(t1=2, prio=2, cost=victim["cost_gpu_s"], evictions=1), storm=storm)


# ---------------------------------------------------------------- objective item 6


@pytest.mark.parametrize("planner", ["cpsat", "greedy"])
def test_at_equal_cost_and_count_the_victim_of_the_lower_tier_goes(planner: str) -> None:
    # Two nodes, each held by one job with the same cost (8 x 100 GPU-s): a tier-3 job
    # on n1 (node ids would prefer it) and a tier-4 job on n2 (tier 4 preemptible, and
    # tier 1 may preempt it). The tier-1 job takes n2: at equal cost and count the
    # victim of the lower tier goes (objective item 6's tie-break, before best fit).
    # Then, between two tier-3 victims: the lower priority; then the one started last.
    policy = {"tiers": {"1": {"can_preempt": [2, 3, 4]},
                        "4": {"preemptible": True, "min_runtime_s": 0}}}
    nodes = [node("n1"), node("n2")]
    jobs = [run("a3", 3, {"n1": ALL8}), run("b4", 4, {"n2": ALL8}), pend("t", 1, 8)]
    p = solve(snap(nodes, jobs, policy), planner)
    assert [e["job"] for e in p["evictions"]] == ["b4"]
    jobs = [run("a", 3, {"n1": ALL8}, priority=5), run("b", 3, {"n2": ALL8}, priority=2),
            pend("t", 1, 8)]
    assert [e["job"] for e in solve(snap(nodes, jobs), planner)["evictions"]] == ["b"]
    jobs = [run("a", 3, {"n1": ALL8}, started="2026-11-30T03:00:00Z"),
            run("b", 3, {"n2": ALL8}, started="2026-11-30T05:00:00Z"), pend("t", 1, 8)]
    assert [e["job"] for e in solve(snap(nodes, jobs), planner)["evictions"]] == ["b"]
