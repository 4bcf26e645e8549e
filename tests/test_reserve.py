"""policy.reserve: nodes kept open for the big shards of tier-1 jobs (an extension of
the contract, a planner's choice: models.policy.Reserve, planner/core/problem.py).

Conventions of test_planner_cases.py: Monday 2026-11-30 08:00Z, 8-GPU NVSwitch
nodes, checkpoints of size 0 with a signal (cost: GPUs x restore 100 s); running
jobs started at 04:00 unless said otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_planner_cases import OLD, deferred_entry, node, nodes_of, pend, run, snap, solve

from models import InputError, Policy, load_snapshot
from models.policy import Reserve
from planner.core.problem import build_problem

RECENT = "2026-11-30T07:50:00Z"  # 10 min ago: tier 3 immune for 20 more min (R6)


# (the default keeps none below 32 nodes); the tests below on the fullest open nodes
# ask for them: 2 nodes, prefer "full", shards of half a node
SMALL = {"reserve": {"min_cluster_nodes": 16, "nodes": 2, "prefer": "full",
                     "min_shard_fraction": 0.5}}


def _cluster(extra: list[dict[str, Any]], policy: dict | None = None) -> dict[str, Any]:
    """16 nodes. n00-n12 and n13 are each held whole by a tier-3 job started 10 min
    ago (immune, R6): closed. n14: an old tier-3 job on GPUs 0-5 (2 free); n15: an
    old tier-3 job on all 8 GPUs (0 free). Both are open: a tier-1 job may evict
    everything on them. The reserve of SMALL (from 16 nodes), max(2, floor(0.02 x
    16)) = 2 nodes, takes the open nodes with the fewest free GPUs: n15 (0), then n14
    (2)."""
    nodes = [node(f"n{i:02d}") for i in range(16)]
    jobs = [run(f"imm{i:02d}", 3, {f"n{i:02d}": list(range(8))}, started=RECENT)
            for i in range(14)]
    jobs += [run("r14", 3, {"n14": list(range(6))}), run("r15", 3, {"n15": list(range(8))})]
    return snap(nodes, jobs + extra, SMALL if policy is None else policy)


def test_the_count_follows_the_cluster_size() -> None:
    r = Reserve()
    # max(4, floor(0.02 x N)) from 32 up nodes on; none below
    assert [r.count(n) for n in (1, 16, 31, 32, 100, 249, 250, 12_500)] == [
        0, 0, 0, 4, 4, 4, 5, 250]
    assert (r.prefer, r.min_shard_fraction) == ("empty", 0.25)
    assert Reserve(fraction=0.05).count(100) == 5
    assert Reserve(nodes=0, fraction=0.0).count(1_000) == 0
    assert Reserve(min_cluster_nodes=0, nodes=3).count(2) == 2  # (never more than the nodes)
    assert Policy.model_validate({"reserve": None}).reserve is None
    assert Policy.model_validate({"reserve": {"nodes": 4}}).reserve == Reserve(nodes=4)


def test_the_open_nodes_with_fewest_free_gpus_are_reserved_for_big_tier1_shards() -> None:
    # A third open node, n13 emptied (8 free), ranks after n15 (0 free) and n14 (2).
    data = _cluster([pend("big", 1, 8), pend("half", 1, 4), pend("small", 1, 1),
                     pend("low", 3, 1, submitted_at=OLD), pend("mid", 2, 8, submitted_at=OLD)])
    data["jobs"] = [j for j in data["jobs"] if j["id"] != "imm13"]
    p = build_problem(load_snapshot(data))
    assert sorted(p.nodes[i].node.id for i in p.reserved) == ["n14", "n15"]
    ids = {p.nodes[i].node.id: i for i in range(16)}
    kept = {ids["n14"], ids["n15"]}
    # tier-1 shards of at least half a node (4 of 8 GPUs) may use them, nothing else
    assert kept <= set(p.pending["big"].candidates)
    assert kept <= set(p.pending["half"].candidates)
    for j in ("small", "low", "mid"):
        assert not kept & set(p.pending[j].candidates), j
        assert len(p.pending[j].candidates) == 14
    # with the reserve off, every node is a candidate of every job
    data["policy"] = {"reserve": None}
    q = build_problem(load_snapshot(data))
    assert q.reserved == frozenset()
    assert all(len(i.candidates) == 16 for i in q.pending.values())


@pytest.mark.parametrize("planner", ["cpsat", "greedy", "k8s", "slurm"])
def test_lower_tiers_and_small_tier1_shards_stay_off_the_reserved_nodes(planner: str) -> None:
    # low (tier 3, 1 GPU) fits only n14's two free GPUs, small (tier 1, 1 GPU) could
    # also evict r14 or r15; both nodes are reserved and everything else is immune:
    # both wait, and low's detail names n14. big (tier 1, 8 GPUs) takes n14: r14
    # costs 6 x 100 = 600 GPU-s against r15's 800, and its 2 free GPUs come with it.
    data = _cluster([pend("big", 1, 8), pend("small", 1, 1),
                     pend("low", 3, 1, submitted_at=OLD)])
    p = solve(data, planner)
    assert nodes_of(p, "big") == {"n14": list(range(8))}
    assert [e["job"] for e in p["evictions"]] == ["r14"]
    assert p["objective"]["admitted_gpus"] == {"1": 8, "2": 0, "3": 0}
    low = deferred_entry(p, "low")
    assert low["reason"] == "PROTECTED"
    assert low["detail"].endswith(
        "; n14 has free GPUs for it but is kept open for tier 1 jobs taking at least 50% "
        "of a node's GPUs (policy.reserve)")
    assert deferred_entry(p, "small")["reason"] == "PROTECTED"


def test_the_note_names_each_reserved_node_with_room_whatever_its_free_gpus() -> None:
    # 3 reserved nodes of one kind that differ in their free GPUs (the note decides
    # once per kind of node and free set): prefer "full" takes n15 (0 free), n14 (2)
    # and n13, emptied (8). big (tier 1, 8 GPUs) takes n13 without evicting; low
    # (tier 3, 1 GPU) waits behind immune jobs, and its note names the reserved nodes
    # whose free GPUs in the snapshot hold it: n13 and n14, not n15
    policy = {"reserve": {**SMALL["reserve"], "nodes": 3}}
    data = _cluster([pend("big", 1, 8), pend("low", 3, 1, submitted_at=OLD)], policy)
    data["jobs"] = [j for j in data["jobs"] if j["id"] != "imm13"]
    p = solve(data)
    assert nodes_of(p, "big") == {"n13": list(range(8))}
    assert p["evictions"] == []
    low = deferred_entry(p, "low")
    assert low["reason"] == "PROTECTED"
    assert low["detail"].endswith(
        "; n13 and n14 have free GPUs for it but are kept open for tier 1 jobs taking at "
        "least 50% of a node's GPUs (policy.reserve)")


def test_without_the_reserve_the_small_jobs_take_the_open_nodes() -> None:
    # reserve null: low takes a free GPU of n14 and small evicts there too (the
    # cheapest room: r14 for 600 GPU-s, or a free GPU); big then finds n15 (r15,
    # 800 GPU-s): the same tier-1 GPUs admitted, a tier-3 GPU more, and both open
    # nodes now hold work that cannot be evicted (tier 1, or immune tier 3)
    data = _cluster([pend("big", 1, 8), pend("small", 1, 1),
                     pend("low", 3, 1, submitted_at=OLD)], {"reserve": None})
    p = solve(data)
    assert p["objective"]["admitted_gpus"] == {"1": 9, "2": 0, "3": 1}
    assert set(nodes_of(p, "low")) == {"n14"}


def test_fewer_than_min_cluster_nodes_reserve_nothing() -> None:
    # the default policy on the 16 nodes (fewer than 32), and 15 of them at 16
    data = _cluster([pend("low", 3, 1, submitted_at=OLD)], {})
    assert set(nodes_of(solve(data), "low")) == {"n14"}
    data = _cluster([pend("low", 3, 1, submitted_at=OLD)])
    data["nodes"] = data["nodes"][1:]  # (imm00's node gone: imm00 too)
    data["jobs"] = [j for j in data["jobs"] if j["id"] != "imm00"]
    assert set(nodes_of(solve(data), "low")) == {"n14"}


def test_a_reserve_tier_not_in_the_policy_is_bad_input() -> None:
    data = _cluster([], {"reserve": {"tiers": [7]}})
    with pytest.raises(InputError, match=r"policy\.reserve\.tiers: tier 7 is not defined"):
        load_snapshot(data)


def test_whatif_switches_the_reserve_off(tmp_path: Any, capsys: Any) -> None:
    # The case above through `whatif`: with the reserve (from 16 nodes here) big
    # evicts r14 and small and low wait (PROTECTED); with `reserve=null` low takes a
    # free GPU of n14, small the other, and big evicts r15: nothing waits.
    import json

    import cli

    path = tmp_path / "s.json"
    path.write_text(json.dumps(_cluster([pend("big", 1, 8), pend("small", 1, 1),
                                         pend("low", 3, 1, submitted_at=OLD)])))
    rc = cli.main(["whatif", str(path), "--deterministic", "--format", "json",
                   "--set", "policy.reserve=null", "--name", "off"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["base"]["evictions"], out["base"]["deferred"]) == (1, {"PROTECTED": 2})
    off = out["variants"][0]
    assert (off["evictions"], off["deferred"]) == (1, {})


@pytest.mark.parametrize("planner", ["cpsat", "greedy", "k8s", "slurm"])
def test_prefer_empty_reserves_the_open_nodes_with_most_free_gpus(planner: str) -> None:
    # imm13 gone: three open nodes, n13 (8 free, no job), n14 (2 free, r14) and n15
    # (0 free, r15). prefer "empty" ranks by most free GPUs first: n13 (8), n14 (2);
    # "full" n15 (0), n14 (2). With n13 reserved, low (tier 3, 1 GPU)
    # finds no room (n14 reserved too, every other node immune) and waits; big
    # (tier 1, 8 GPUs) takes the whole free n13 and evicts nothing.
    extra = [pend("big", 1, 8), pend("low", 3, 1, submitted_at=OLD)]
    data = _cluster(extra, {"reserve": {**SMALL["reserve"], "prefer": "empty"}})
    data["jobs"] = [j for j in data["jobs"] if j["id"] != "imm13"]
    p = build_problem(load_snapshot(data))
    assert sorted(p.nodes[i].node.id for i in p.reserved) == ["n13", "n14"]
    plan = solve(data, planner)
    assert nodes_of(plan, "big") == {"n13": list(range(8))}
    assert plan["evictions"] == []
    assert deferred_entry(plan, "low")["reason"] == "PROTECTED"
    # "full" ranks the fullest first: n15 and n14 kept
    data["policy"] = SMALL
    q = build_problem(load_snapshot(data))
    assert sorted(q.nodes[i].node.id for i in q.reserved) == ["n14", "n15"]
    # no tier-1 job of a quarter of a node or more running or pending: nothing is
    # kept, and low starts on free GPUs (n13's or n14's)
    data["policy"] = {"reserve": {"min_cluster_nodes": 16}}
    data["jobs"] = [j for j in data["jobs"] if j["id"] != "big"]
    assert build_problem(load_snapshot(data)).reserved == frozenset()
    assert set(nodes_of(solve(data, planner), "low")) <= {"n13", "n14"}


def test_prefer_is_empty_or_full() -> None:
    data = _cluster([], {"reserve": {"prefer": "most"}})
    with pytest.raises(InputError, match=r"policy\.reserve\.prefer"):
        load_snapshot(data)


def test_nothing_is_kept_without_a_big_shard_of_the_reserve_tiers() -> None:
    # The default reserve keeps nodes only while a tier-1 job whose shards take at
    # least 25% of a node (2 of 8 GPUs) runs or waits: a 1-GPU tier-1 job alone keeps
    # none, a 2-GPU tier-1 job running on n14's free GPUs does. n14 then holds a job
    # tier 1 may not evict (closed): of max(4, floor(0.02 x 16)) = 4 asked, the open
    # nodes n13 (whole, 8 free) and n15 (0 free) are kept.
    pol = {"reserve": {"min_cluster_nodes": 16}}
    data = _cluster([pend("small", 1, 1)], pol)
    data["jobs"] = [j for j in data["jobs"] if j["id"] != "imm13"]
    assert build_problem(load_snapshot(data)).reserved == frozenset()
    data["jobs"].append(run("t1", 1, {"n14": [6, 7]}))
    p = build_problem(load_snapshot(data))
    assert sorted(p.nodes[i].node.id for i in p.reserved) == ["n13", "n15"]


def test_only_nodes_a_big_shard_could_use_are_kept() -> None:
    # Nodes of two sizes: s0-s3 of 2 GPUs, each held whole by an old tier-3 job
    # (open), and b0-b3 of 8 GPUs, empty (open). The 1-GPU tier-1 job is a big shard
    # for a 2-GPU node (1 >= 0.25 x 2) but not for an 8-GPU one (1 < 0.25 x 8): only
    # the 2-GPU nodes are kept (all 4 of max(4, floor(0.02 x 8)) = 4), and the
    # job, the lower tiers too, may still use the empty 8-GPU nodes. A 2-GPU tier-1
    # job is big for both: the 4 emptiest open nodes, b0-b3, are kept.
    nodes = [node(f"s{i}", 2) for i in range(4)] + [node(f"b{i}") for i in range(4)]
    jobs = [run(f"r{i}", 3, {f"s{i}": [0, 1]}) for i in range(4)]
    pol = {"reserve": {"min_cluster_nodes": 8}}
    data = snap(nodes, [*jobs, pend("one", 1, 1), pend("low", 3, 1, submitted_at=OLD)], pol)
    p = build_problem(load_snapshot(data))
    kept = sorted(p.nodes[i].node.id for i in p.reserved)
    assert kept == ["s0", "s1", "s2", "s3"]
    bigs = {p.node_index[f"b{i}"] for i in range(4)}
    assert bigs <= set(p.pending["one"].candidates)
    assert bigs <= set(p.pending["low"].candidates)
    data = snap(nodes, [*jobs, pend("two", 1, 2), pend("low", 3, 1, submitted_at=OLD)], pol)
    p = build_problem(load_snapshot(data))
    assert sorted(p.nodes[i].node.id for i in p.reserved) == ["b0", "b1", "b2", "b3"]
    assert not bigs & set(p.pending["low"].candidates)


def _spent(n: int = 4) -> list[dict[str, Any]]:
    """``n`` evictions 10-40 minutes ago: R15's window (an hour) counts them all."""
    return [{"job": f"gone{i}", "at": f"2026-11-30T07:{20 + 5 * i:02d}:00Z", "gpus": 1}
            for i in range(n)]


@pytest.mark.parametrize("planner", ["cpsat", "greedy", "k8s", "slurm"])
def test_with_the_window_spent_a_small_tier1_shard_takes_a_reserved_nodes_free_gpu(
        planner: str) -> None:
    # The case of test_lower_tiers_and_small_tier1_shards_stay_off_the_reserved_nodes
    # (n14: r14 on GPUs 0-5, 2 free; n15: r15 on all 8; both reserved, every other
    # node immune) after 4 evictions in the last hour: B = max(4, floor(0.03 x 16
    # running)) = 4, H = 4, nothing left. Each eviction now is past the budget
    # (exempt, tier 1's, but each adds past_budget_gpu_s to what the planners
    # minimise), so small (tier 1, 1 GPU) may take the free GPUs of reserved nodes
    # that hold jobs rather than evict. Both tier-1 jobs start (9 GPUs, not 8).
    # cpsat: small on a free GPU of n14, big evicts r15 (800 GPU-s, one victim). The
    # heuristics place big first on the cheapest victim, r14 (600), and small then
    # evicts r15 (800). low (tier 3) still stays off: it waits, PROTECTED.
    data = _cluster([pend("big", 1, 8), pend("small", 1, 1),
                     pend("low", 3, 1, submitted_at=OLD)])
    data["recent_evictions"] = _spent()
    p = build_problem(load_snapshot(data))
    assert p.thrash is not None and (p.thrash.limit, p.thrash.left) == (4, 0)
    kept = {p.node_index["n14"], p.node_index["n15"]}
    assert p.reserved == kept
    assert kept <= set(p.pending["small"].candidates)
    assert not kept & set(p.pending["low"].candidates)
    plan = solve(data, planner)
    assert plan["objective"]["admitted_gpus"] == {"1": 9, "2": 0, "3": 0}
    if planner == "cpsat":
        assert nodes_of(plan, "small") == {"n14": [6]}
        assert [e["job"] for e in plan["evictions"]] == ["r15"]
        assert plan["objective"]["eviction_cost_gpu_s"] == 800
    else:
        assert nodes_of(plan, "big") == {"n14": list(range(8))}
        assert sorted(e["job"] for e in plan["evictions"]) == ["r14", "r15"]
        assert plan["objective"]["eviction_cost_gpu_s"] == 600 + 800
    assert deferred_entry(plan, "low")["reason"] == "PROTECTED"
    # with 3 evictions in the window (1 left) small stays off the reserved nodes
    data["recent_evictions"] = _spent(3)
    q = build_problem(load_snapshot(data))
    assert not kept & set(q.pending["small"].candidates)


def test_a_wholly_free_reserved_node_stays_for_big_shards_with_the_window_spent() -> None:
    # prefer "empty" with imm13 gone: n13 (8 free, no job) and n14 (2 free, r14) are
    # kept. With the window spent the 1-GPU tier-1 job may use n14 (it holds r14), not
    # n13: a whole free node is what the reserve keeps for big shards.
    data = _cluster([pend("big", 1, 8), pend("small", 1, 1)],
                    {"reserve": {**SMALL["reserve"], "prefer": "empty"}})
    data["jobs"] = [j for j in data["jobs"] if j["id"] != "imm13"]
    data["recent_evictions"] = _spent()
    p = build_problem(load_snapshot(data))
    n13, n14 = p.node_index["n13"], p.node_index["n14"]
    assert p.reserved == {n13, n14}
    cands = set(p.pending["small"].candidates)
    assert n14 in cands and n13 not in cands
    plan = solve(data)
    assert nodes_of(plan, "big") == {"n13": list(range(8))}
    assert nodes_of(plan, "small") == {"n14": [6]}
    assert plan["evictions"] == []


def test_keeping_off_the_reserved_nodes_keeps_the_candidates_order() -> None:
    from planner.core.problem import _without
    cands = [0, 2, 3, 5, 8, 9]
    # 0 and 9 at the ends, 5 inside, 4 and 11 not candidates at all
    assert _without(cands, frozenset({0, 4, 5, 9, 11})) == [2, 3, 8]
    assert _without(cands, frozenset()) == cands
    assert _without(cands, frozenset(cands)) == []
    assert _without([], frozenset({1})) == []
