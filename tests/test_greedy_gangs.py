"""Gangs whose best nodes break the storm limit together (planner/heuristics/greedy.py).

Each node's option is checked alone against the storm limit (R11/R12) and the
budgets (R13). A gang takes several nodes, and their victims together may still
flush more than a storage target may take. The greedy planner then takes the
best nodes that stay within the limits together: in another block for a gang
that keeps one block, further down its list for a gang free to use any nodes.
(It used to defer the gang.) A cheap node whose victim has a low storm cap can
refuse every later node of the block; the planner then tries the nodes whose
victims' caps are at least each cap in turn (the last test).

The cluster, at Monday 2026-11-30 08:00Z: storage ``s`` writes 1 GB/s, ``t``
10 GB/s; grace ``max_s`` 150 s, safety 1. Four 8-GPU NVSwitch nodes: ``n1`` and
``n2`` in block ``b1`` on ``s``, ``n3`` and ``n4`` in block ``b2`` on ``t``. Each
holds one tier-3 job on all its GPUs, started 4 h ago, with a 100 GB checkpoint
(signal, no barrier, no cleanup):

- ``w1``, ``w2`` (on ``s``, restore 10 s): cost 8 x (10 + 100 / 1) = 880 GPU-s
  each. While one flushes, ``s`` may take (150 - 0) x 1 = 150 GB: one alone
  (100 GB) fits, both (200 GB) do not.
- ``w3``, ``w4`` (on ``t``, restore 1,000 s): cost 8 x (1,000 + 100 / 10) =
  8,080 GPU-s each; ``t`` may take 1,500 GB.

One pending tier-2 job ``G``: 2 nodes x 8 GPUs.

The last two tests check the explanation of a gang deferred next to a given plan:
a storm only where some block holds its nodes and the storm limit keeps them from
it (one of them on a cluster of its own).
"""

from __future__ import annotations

from typing import Any

from snapshot_parts import whole_node_holder as holder

from models import SolverInfo, load_snapshot
from planner.checks.assemble import assemble
from planner.checks.verify import verify
from planner.core.decision import Decision, clean, objective_of
from planner.core.problem import build_problem
from planner.heuristics.greedy import GreedyPlanner

NOW = "2026-11-30T08:00:00Z"


def _snap(same_block: bool) -> dict[str, Any]:
    def node(i: int) -> dict[str, Any]:
        return {"id": f"n{i}", "gpus": 8, "nvlink": "nvswitch", "block": "b1" if i <= 2 else "b2",
                "storage": "s" if i <= 2 else "t"}

    gang = {"id": "G", "tier": 2, "state": "pending", "gpus_per_node": 8, "nodes": 2,
            "priority": 10, "topology": "any", "same_block": same_block}
    return {"version": 1, "now": NOW, "nodes": [node(i) for i in range(1, 5)],
            "jobs": [holder(i, 100, 0, 10 if i <= 2 else 1000) for i in range(1, 5)] + [gang],
            "storage": [{"id": "s", "write_gb_per_s": 1.0}, {"id": "t", "write_gb_per_s": 10.0}],
            "policy": {"grace": {"min_s": 10, "max_s": 150, "safety": 1.0}}}


def _plan(snap: dict[str, Any]) -> tuple[dict[str, list[str]], set[str], Any]:
    problem = build_problem(load_snapshot(snap))
    d = clean(problem, GreedyPlanner(problem).solve())
    p = assemble(problem, d, "feasible", SolverInfo(engine="test", status="TEST"))
    assert verify(load_snapshot(snap), p) == []
    nodes = {j: sorted(problem.nodes[ni].node.id for ni, _m in parts)
             for j, parts in d.placements.items()}
    return nodes, d.victims, objective_of(problem, d)


def test_a_gang_that_keeps_one_block_takes_the_block_within_the_storm_limit() -> None:
    # Block b1 is the cheaper (880 + 880 = 1,760 against 16,160 GPU-s), but w1 and
    # w2 together would flush 200 GB to s, over its 150 GB; b2's victims flush to t
    # (200 GB of 1,500). G takes n3 and n4: 16 tier-2 GPUs for 16,160 GPU-s.
    nodes, victims, obj = _plan(_snap(same_block=True))
    assert nodes == {"G": ["n3", "n4"]} and victims == {"w3", "w4"}
    assert obj.admitted_gpus == {"1": 0, "2": 16, "3": 0}
    assert (obj.eviction_cost_gpu_s, obj.evictions) == (16160, 2)


def test_a_gang_free_to_use_any_nodes_passes_over_a_node_that_breaks_the_limit() -> None:
    # Its two best nodes are n1 and n2 (880 each), which break the limit together.
    # Taken best first, within the limit: n1 (w1, 100 GB on s), not n2 (s would
    # take 200 GB), then n3 (n3 and n4 tie at 8,080; n3's id first): 880 + 8,080
    # = 8,960 GPU-s.
    nodes, victims, obj = _plan(_snap(same_block=False))
    assert nodes == {"G": ["n1", "n3"]} and victims == {"w1", "w3"}
    assert obj.admitted_gpus == {"1": 0, "2": 16, "3": 0}
    assert (obj.eviction_cost_gpu_s, obj.evictions) == (8960, 2)


def _low_cap_snap() -> dict[str, Any]:
    """One block b1 of three 8-GPU NVSwitch nodes on storage s (1 GB/s); grace
    ``max_s`` 150 s, safety 1. Each node holds one tier-3 job on all its GPUs
    (signal, no cleanup):

    - ``w1`` on n1: 20 GB, barrier 120 s, restore 10 s: cost 8 x (10 + 20) = 240
      GPU-s. Its need is 120 + F_s / 1 <= 150, so s may take only 30 GB while it
      flushes (its storm cap).
    - ``w2`` on n2: 60 GB, no barrier, restore 10 s: cost 8 x (10 + 60) = 560; cap
      150 GB.
    - ``w3`` on n3: 60 GB, no barrier, restore 20 s: cost 8 x (20 + 60) = 640; cap
      150 GB.

    Pending tier-2 gang ``G``: 2 nodes x 8 GPUs in one block."""
    def node(i: int) -> dict[str, Any]:
        return {"id": f"n{i}", "gpus": 8, "nvlink": "nvswitch", "block": "b1", "storage": "s"}

    gang = {"id": "G", "tier": 2, "state": "pending", "gpus_per_node": 8, "nodes": 2,
            "priority": 10, "topology": "any", "same_block": True}
    return {"version": 1, "now": NOW, "nodes": [node(i) for i in range(1, 4)],
            "jobs": [holder(1, 20, 120, 10), holder(2, 60, 0, 10), holder(3, 60, 0, 20), gang],
            "storage": [{"id": "s", "write_gb_per_s": 1.0}],
            "policy": {"grace": {"min_s": 10, "max_s": 150, "safety": 1.0}}}


def test_a_gang_leaves_out_the_cheap_node_whose_victim_caps_the_storage_low() -> None:
    # Best first, n1 (240) is taken; then n2 or n3 would make s take 20 + 60 = 80 GB
    # while w1 flushes, over w1's 30 GB, so the greedy pass defers G (as the planner
    # did before). Without n1 (options whose tightest cap is at least 150 GB): n2
    # and n3 flush 120 GB <= 150. The only pair within the limit: 560 + 640 = 1,200.
    nodes, victims, obj = _plan(_low_cap_snap())
    assert nodes == {"G": ["n2", "n3"]} and victims == {"w2", "w3"}
    assert obj.admitted_gpus == {"1": 0, "2": 16, "3": 0}
    assert (obj.eviction_cost_gpu_s, obj.evictions) == (1200, 2)


def _shared_snap(nodes: int, same_block: bool) -> dict[str, Any]:
    """Four 8-GPU NVSwitch nodes on storage t (10 GB/s): n1, n2 in block b1, n3, n4 in
    b2. A running tier-3 gang ``W`` holds all of n1 and n2 (16 GPUs, 100 GB
    checkpoint, restore 100 s): cost 16 x (100 + 100 / 10) = 1,760 GPU-s, which each
    node's option alone counts. ``w3`` and ``w4`` hold n3 and n4 (restore 150 s):
    8 x (150 + 10) = 1,280 each. Pending tier-2 gang ``G``: ``nodes`` x 8 GPUs."""
    def node(i: int) -> dict[str, Any]:
        return {"id": f"n{i}", "gpus": 8, "nvlink": "nvswitch",
                "block": "b1" if i <= 2 else "b2", "storage": "t"}

    gang_victim = {**holder(1, 100, 0, 100), "id": "W", "nodes": 2,
                   "placement": [{"node": f"n{i}", "gpus": list(range(8))} for i in (1, 2)]}
    gang = {"id": "G", "tier": 2, "state": "pending", "gpus_per_node": 8, "nodes": nodes,
            "priority": 10, "topology": "any", "same_block": same_block}
    return {"version": 1, "now": NOW, "nodes": [node(i) for i in range(1, 5)],
            "jobs": [gang_victim, holder(3, 100, 0, 150), holder(4, 100, 0, 150), gang],
            "storage": [{"id": "t", "write_gb_per_s": 10.0}],
            "policy": {"grace": {"min_s": 10, "max_s": 150, "safety": 1.0}}}


def test_a_gang_evicts_one_victim_that_holds_two_of_its_nodes() -> None:
    # Node by node n3 and n4 (1,280 each) rank before n1 and n2 (1,760 each, W's
    # whole cost on each), 2,560 against 3,520 summed; but W is evicted once: n1 and
    # n2 cost 1,760 in all, one eviction. In one block or free to use any nodes.
    for same_block in (False, True):
        nodes, victims, obj = _plan(_shared_snap(2, same_block))
        assert nodes == {"G": ["n1", "n2"]} and victims == {"W"}
        assert obj.admitted_gpus == {"1": 0, "2": 16, "3": 0}
        assert (obj.eviction_cost_gpu_s, obj.evictions) == (1760, 1)


def test_a_gang_takes_the_shared_victims_nodes_and_the_best_other_one() -> None:
    # G needs 3 nodes: W's two (1,760 once) and the better of n3 and n4 (1,280 each;
    # n3's id first): 3,040 GPU-s, 2 evictions. Node by node the search took n3, n4
    # and n1 (1,280 + 1,280 + 1,760 = 4,320, 3 evictions). (R15 off: its window
    # holds 16 GPUs' evictions on this 32-GPU cluster, and G needs 24.)
    snap = _shared_snap(3, False)
    snap["policy"]["thrash"] = None
    nodes, victims, obj = _plan(snap)
    assert nodes == {"G": ["n1", "n2", "n3"]} and victims == {"W", "w3"}
    assert (obj.eviction_cost_gpu_s, obj.evictions) == (3040, 2)


def test_a_gang_whose_blocks_each_lost_a_node_to_the_plan_is_outranked_not_stormed() -> None:
    # Its own cluster: 8-GPU nodes a1, a2 in block A and b1, b2 in block B; tier-3
    # jobs r1 on a1 and r2 on b1 (no checkpoint: nothing to flush), a2 and b2 free.
    # Pending: tier-1 y and z (8 GPUs each) and tier-2 gang x (2 x 8 GPUs, one
    # block). Alone x fits in either block. The plan explained puts y on a2 and z on
    # b2: x's options next to it are a1 (evict r1) and b1 (evict r2), one per block,
    # so no block holds its two nodes and no set of nodes overloads a storage target:
    # the free nodes went to y and z (OUTRANKED), not a storm (the check once took
    # "no set of nodes" for "every set overloads").
    def node(i: str) -> dict[str, Any]:
        return {"id": i, "gpus": 8, "nvlink": "nvswitch", "block": i[0].upper()}

    def running(jid: str, node: str) -> dict[str, Any]:
        return {"id": jid, "tier": 3, "state": "running", "gpus_per_node": 8,
                "started_at": "2026-11-29T08:00:00Z", "topology": "any",
                "placement": [{"node": node, "gpus": list(range(8))}]}

    def pending(jid: str, tier: int, nodes: int) -> dict[str, Any]:
        return {"id": jid, "tier": tier, "state": "pending", "gpus_per_node": 8,
                "nodes": nodes, "topology": "any", "same_block": nodes > 1}

    snap = load_snapshot({
        "version": 1, "now": NOW, "nodes": [node(i) for i in ("a1", "a2", "b1", "b2")],
        "jobs": [running("r1", "a1"), running("r2", "b1"), pending("y", 1, 1),
                 pending("z", 1, 1), pending("x", 2, 2)],
        "storage": [], "policy": {"thrash": {"max_gpu_fraction": None}}})
    problem = build_problem(snap)
    at = problem.node_index
    d = Decision(placements={"y": [(at["a2"], 0xFF)], "z": [(at["b2"], 0xFF)]})
    p = assemble(problem, d, "feasible", SolverInfo(engine="test", status="TEST"))
    assert verify(snap, p) == []
    assert [(x.job, x.reason, x.detail) for x in p.deferred] == [
        ("x", "OUTRANKED", ("needs 2 nodes x 8 GPUs (one block); the GPUs it could free "
                            "went to more valuable jobs: on a2 to tier-1 job y; on b2 to "
                            "tier-1 job z"))]


def test_a_gang_whose_one_block_left_breaks_the_storm_limit_together_is_stormed() -> None:
    # The cluster above, G keeping one block, R15 counting victims only. The plan
    # explained puts tier-1 job y on n4, evicting w4 (100 GB to t). Next to it G's
    # options are n1, n2 (block b1) and n3 (b2, which lost n4): only b1 holds its two
    # nodes, and w1 and w2 flush 200 GB to s together, past the 150 GB it may take: a
    # storm (alone G would take n3 and n4, 200 GB to t within its 1,500 GB).
    snap = _snap(same_block=True)
    snap["jobs"].append({"id": "y", "tier": 1, "state": "pending", "gpus_per_node": 8,
                         "topology": "any"})
    snap["policy"]["thrash"] = {"max_gpu_fraction": None}  # (R15's GPUs would bind first)
    problem = build_problem(load_snapshot(snap))
    d = Decision(victims={"w4"}, placements={"y": [(problem.node_index["n4"], 0xFF)]})
    p = assemble(problem, d, "feasible", SolverInfo(engine="test", status="TEST"))
    assert verify(load_snapshot(snap), p) == []
    assert [(x.job, x.reason, x.detail) for x in p.deferred] == [
        ("G", "STORM", ("needs 2 nodes x 8 GPUs (one block); its victims' checkpoints "
                        "would have to flush beyond what grace.max_s 150 s allows (R11); "
                        "retry next tick"))]
