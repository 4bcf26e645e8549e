"""Tests of the Kubernetes-style and Slurm-style baselines (planner/baseline_k8s.py,
planner/baseline_slurm.py), next to the greedy planner they are compared with.

Each story is a tiny hand-built cluster at Monday 2026-11-30 08:00Z whose
victims are worked out by hand from the documented rules of each baseline.
Unless a story says otherwise, checkpoints have size 0 and a signal, so a
victim's cost is ``gpus * restore_s`` (no work lost, no flush). Every plan is
run through the verifier directly (``plan()`` would hide an invalid plan behind
its fallback) and must come back from ``plan()`` untouched by that fallback.
"""

from __future__ import annotations

from typing import Any

import pytest

from models import SolverInfo, load_snapshot
from planner import plan
from planner.assemble import assemble
from planner.baselines import get_baseline
from planner.generate import generate
from planner.problem import build_problem
from planner.verify import verify

NOW = "2026-11-30T08:00:00Z"  # a Monday
OLD = "2026-11-30T04:00:00Z"  # 4 h ago: past every tier's min runtime
BASELINES = ("k8s", "slurm")
ALL = ("greedy", "k8s", "slurm")


# ---------------------------------------------------------------- builders


def node(nid: str, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return {"id": nid, "gpus": gpus, **kw}


def run(jid: str, tier: int, where: dict[str, list[int]], *, started: str = OLD,
        restore: float = 100.0, **kw: Any) -> dict[str, Any]:
    """A running job placed on ``{node: gpus}`` (same GPU count on each node)."""
    per = {len(g) for g in where.values()}
    assert len(per) == 1
    ck = {"restore_s": restore, **kw.pop("checkpoint", {})}
    return {"id": jid, "tier": tier, "state": "running", "gpus_per_node": per.pop(),
            "nodes": len(where), "started_at": started, "checkpoint": ck,
            "placement": [{"node": n, "gpus": g} for n, g in where.items()], **kw}


def pend(jid: str, tier: int, gpus: int, **kw: Any) -> dict[str, Any]:
    return {"id": jid, "tier": tier, "state": "pending", "gpus_per_node": gpus, **kw}


def snapshot(nodes: list[dict], jobs: list[dict], policy: dict | None = None,
             storage: list[dict] | None = None) -> dict[str, Any]:
    return {"version": 1, "now": NOW, "storage": storage or [], "nodes": nodes, "jobs": jobs,
            "policy": policy or {}}


def decide(name: str, data: dict[str, Any]) -> tuple[set[str], dict[str, dict[str, list[int]]]]:
    """Victims and placements ({job: {node: gpus}}) of a planner's verified plan."""
    snap = load_snapshot(data)
    problem = build_problem(snap)
    decision = get_baseline(name)(problem).solve()
    p = assemble(problem, decision, "feasible", SolverInfo(engine=name, status="HEURISTIC"))
    assert verify(snap, p) == [], f"{name} plan breaks rules: {verify(snap, p)}"
    via_plan = plan(snap, planner=name)
    assert via_plan.solver.engine == name  # not replaced by the safe fallback
    assert [e.job for e in via_plan.evictions] == [e.job for e in p.evictions]
    victims = {e.job for e in p.evictions}
    placed = {pl.job: {part.node: part.gpus for part in pl.placement} for pl in p.placements}
    return victims, placed


# ---------------------------------------------------------------- node choice


def fewest_vs_cheapest() -> dict[str, Any]:
    """Node a: one tier-3 job costing 2 x 500 = 1000 GPU-s. Node b: two tier-3 jobs
    costing 1 x 100 each (200 in total). A tier-1 job needs 2 GPUs."""
    return snapshot(
        [node("a", 2), node("b", 2)],
        [run("a-one", 3, {"a": [0, 1]}, restore=500),
         run("b-x", 3, {"b": [0]}), run("b-y", 3, {"b": [1]}),
         pend("urgent", 1, 2)])


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_take_the_node_with_fewest_victims(name: str) -> None:
    victims, placed = decide(name, fewest_vs_cheapest())
    assert victims == {"a-one"}
    assert placed == {"urgent": {"a": [0, 1]}}


def test_greedy_takes_the_cheapest_victims_instead() -> None:
    victims, placed = decide("greedy", fewest_vs_cheapest())
    assert victims == {"b-x", "b-y"}
    assert placed == {"urgent": {"b": [0, 1]}}


def test_k8s_prefers_the_node_whose_top_victim_is_least_important() -> None:
    """One victim either way: a tier-2 job on a, a tier-3 job on b (dearer, so greedy
    would take a). kube-scheduler spares the more important tier 2."""
    data = snapshot(
        [node("a", 4), node("b", 4)],
        [run("t2", 2, {"a": [0, 1, 2, 3]}, restore=10),
         run("t3", 3, {"b": [0, 1, 2, 3]}, restore=1000),
         pend("urgent", 1, 4)])
    assert decide("k8s", data)[0] == {"t3"}
    assert decide("slurm", data)[0] == {"t3"}  # its last victim comes earlier (tier 3 first)
    assert decide("greedy", data)[0] == {"t2"}


def test_baselines_fit_on_free_gpus_without_preempting() -> None:
    """a has 2 free GPUs, b has 4 free: best fit puts the 2-GPU job on a; nobody is
    evicted although victims sit next to the free GPUs."""
    data = snapshot(
        [node("a", 4), node("b", 8)],
        [run("r-a", 3, {"a": [0, 1]}), run("r-b", 3, {"b": [0, 1, 2, 3]}),
         pend("job", 1, 2)])
    for name in ALL:
        assert decide(name, data) == (set(), {"job": {"a": [2, 3]}})


# ---------------------------------------------------------------- victims on a node


def test_k8s_reprieves_the_most_important_first() -> None:
    """Node a: tier-3 ``hi`` (priority 9, young) and ``lo`` (priority 1, old), 4 GPUs each,
    plus tier-2 ``mid``. A 4-GPU tier-1 job: remove all three, reprieve ``mid`` (tier 2),
    then ``hi`` (higher priority); ``lo`` must go. Slurm ignores priority and evicts the
    youngest tier-3 job, ``hi``."""
    data = snapshot(
        [node("a", 12)],
        [run("mid", 2, {"a": [0, 1, 2, 3]}),
         run("hi", 3, {"a": [4, 5, 6, 7]}, priority=9, started="2026-11-30T07:00:00Z"),
         run("lo", 3, {"a": [8, 9, 10, 11]}, priority=1),
         pend("urgent", 1, 4)])
    assert decide("k8s", data) == ({"lo"}, {"urgent": {"a": [8, 9, 10, 11]}})
    assert decide("slurm", data) == ({"hi"}, {"urgent": {"a": [4, 5, 6, 7]}})


def test_slurm_evicts_lowest_tier_first_even_if_older() -> None:
    """Tier-2 ``young2`` and tier-3 ``old3`` share node a: tier 3 goes first."""
    data = snapshot(
        [node("a", 4)],
        [run("young2", 2, {"a": [0, 1]}, started="2026-11-30T06:30:00Z"),
         run("old3", 3, {"a": [2, 3]}, started="2026-11-29T08:00:00Z"),
         pend("urgent", 1, 2)])
    for name in BASELINES:
        assert decide(name, data) == ({"old3"}, {"urgent": {"a": [2, 3]}})


def test_slurm_evicts_the_youngest() -> None:
    """Two tier-3 jobs on node a, equal cost and priority: Slurm evicts the one that
    started last. kube-scheduler agrees here: an older pod counts as more important,
    so ``old`` is reprieved first and ``young`` is left as the victim."""
    data = snapshot(
        [node("a", 4)],
        [run("old", 3, {"a": [0, 1]}, started="2026-11-30T02:00:00Z"),
         run("young", 3, {"a": [2, 3]}, started="2026-11-30T07:00:00Z"),
         pend("urgent", 1, 2)])
    assert decide("slurm", data) == ({"young"}, {"urgent": {"a": [2, 3]}})
    assert decide("k8s", data) == ({"young"}, {"urgent": {"a": [2, 3]}})


def test_slurm_prefers_victims_on_fewer_nodes() -> None:
    """On node a, a 1-node tier-3 job and one shard of a younger 2-node tier-3 gang:
    youngest-first alone would pick the gang, but Slurm's key puts fewer nodes first."""
    data = snapshot(
        [node("a", 2), node("c", 1)],
        [run("single", 3, {"a": [0]}, started="2026-11-30T05:00:00Z"),
         run("gang", 3, {"a": [1], "c": [0]}, started="2026-11-30T07:00:00Z"),
         pend("urgent", 1, 1)])
    assert decide("slurm", data) == ({"single"}, {"urgent": {"a": [0]}})


def test_slurm_takes_victims_in_order_until_the_job_fits() -> None:
    """Node a: ``young`` (1 GPU, on GPU 0) and ``old`` (3 GPUs). A 3-GPU job: Slurm removes
    ``young`` first (not enough), then ``old``; the allocation (lowest GPUs, 0-2) uses
    both, so both are evicted. kube-scheduler reprieves ``young`` and evicts only ``old``."""
    data = snapshot(
        [node("a", 4)],
        [run("young", 3, {"a": [0]}, started="2026-11-30T07:00:00Z"),
         run("old", 3, {"a": [1, 2, 3]}),
         pend("urgent", 1, 3)])
    assert decide("slurm", data) == ({"young", "old"}, {"urgent": {"a": [0, 1, 2]}})
    assert decide("k8s", data) == ({"old"}, {"urgent": {"a": [1, 2, 3]}})


# ---------------------------------------------------------------- protected jobs


def protected_cluster() -> dict[str, Any]:
    """Full nodes: tier-1 ``prod`` (R5), tier-3 ``fresh`` started 10 min ago (R6, 30 min
    min runtime), tier-2 ``dev`` (only tier 1 may preempt it), tier-3 ``scav`` on an
    A100 node; a tier-2 and a tier-3 H100 job wait."""
    return snapshot(
        [node("n1", gpu_type="H100"), node("n2", gpu_type="H100"),
         node("n3", gpu_type="H100"), node("x1", gpu_type="A100")],
        [run("prod", 1, {"n1": list(range(8))}),
         run("fresh", 3, {"n2": list(range(8))}, started="2026-11-30T07:50:00Z"),
         run("dev", 2, {"n3": list(range(8))}),
         run("scav", 3, {"x1": list(range(8))}),
         pend("want2", 2, 8, gpu_type="H100"), pend("want3", 3, 8, gpu_type="H100")])


@pytest.mark.parametrize("name", ALL)
def test_never_evict_tier1_immune_or_equal_tier(name: str) -> None:
    victims, placed = decide(name, protected_cluster())
    assert victims == set()
    assert placed == {}
    reasons = {d.job: d.reason for d in plan(protected_cluster(), planner=name).deferred}
    assert reasons == {"want2": "PROTECTED", "want3": "PROTECTED"}


@pytest.mark.parametrize("name", ALL)
def test_tier1_may_take_tier2_but_never_tier1_or_immune(name: str) -> None:
    data = protected_cluster()
    data["jobs"].append(pend("boss", 1, 8, gpu_type="H100", priority=5))
    victims, placed = decide(name, data)
    assert victims == {"dev"}
    assert placed == {"boss": {"n3": list(range(8))}}


@pytest.mark.parametrize("name", ALL)
def test_outside_windows_and_in_cooldown(name: str) -> None:
    """Tier 2 is preemptible only at night (R8), so ``dev`` stays; ``again`` was just
    preempted (R9 backoff) and waits although a node is free."""
    data = protected_cluster()
    data["policy"] = {"tiers": {"2": {"windows": [{"start": "00:00", "end": "06:00"}]}}}
    data["nodes"].append(node("free", 8, gpu_type="H100"))
    data["jobs"] += [pend("boss", 1, 8, gpu_type="H100", priority=5),
                     pend("again", 1, 8, gpu_type="H100", priority=9, preemptions=1,
                          last_preempted_at="2026-11-30T07:45:00Z")]
    victims, placed = decide(name, data)
    assert victims == set()
    assert placed == {"boss": {"free": list(range(8))}}


# ---------------------------------------------------------------- storm and budgets


def storm_cluster(**policy: Any) -> dict[str, Any]:
    """Nodes a, b hold one 8-GPU tier-3 job each with a 3000 GB checkpoint (40 GB/s:
    alone 75 s flush, grace 150 s <= 180; both together 150 s flush, grace 300 > 180:
    R11 forbids evicting both). Node c holds two 4-GPU tier-3 jobs without a signal.
    Two 8-GPU tier-1 jobs wait."""
    big = {"size_gb": 3000}
    return snapshot(
        [node("a"), node("b"), node("c")],
        [run("x", 3, {"a": list(range(8))}, checkpoint=big),
         run("y", 3, {"b": list(range(8))}, checkpoint=big),
         run("z1", 3, {"c": [0, 1, 2, 3]}, checkpoint={"signal": None}),
         run("z2", 3, {"c": [4, 5, 6, 7]}, checkpoint={"signal": None}),
         pend("p1", 1, 8, priority=10), pend("p2", 1, 8, priority=5)],
        policy=policy, storage=[{"id": "fs", "write_gb_per_s": 40.0}])


@pytest.mark.parametrize("name", BASELINES)
def test_storm_limit_moves_the_second_job_to_the_next_node(name: str) -> None:
    """p1 takes a (one victim, first by node id); for p2, b's single victim would
    overload the storage, so it takes c with two victims."""
    victims, placed = decide(name, storm_cluster())
    assert victims == {"x", "z1", "z2"}
    assert placed == {"p1": {"a": list(range(8))}, "p2": {"c": list(range(8))}}


@pytest.mark.parametrize("name", BASELINES)
def test_eviction_budget_skips_nodes_and_jobs(name: str) -> None:
    """At most 2 evictions: p1 evicts x; p2 can afford neither y (storm) nor z1+z2."""
    victims, placed = decide(name, storm_cluster(max_evictions_per_tick=2))
    assert victims == {"x"}
    assert placed == {"p1": {"a": list(range(8))}}


@pytest.mark.parametrize("name", BASELINES)
def test_zero_budget_forbids_evictions(name: str) -> None:
    assert decide(name, storm_cluster(max_evictions_per_tick=0)) == (set(), {})
    assert decide(name, storm_cluster(max_evicted_gpu_fraction=0.1)) == (set(), {})


# ---------------------------------------------------------------- queue order and gangs


def test_k8s_queue_is_priority_order_greedy_is_size_first() -> None:
    """One free 8-GPU node, two tier-1 jobs: k8s starts the higher-priority 4-GPU job
    first (then the 8-GPU one no longer fits); greedy admits the larger job first."""
    data = snapshot([node("a")], [pend("small", 1, 4, priority=9),
                                  pend("big", 1, 8, priority=1)])
    assert set(decide("k8s", data)[1]) == {"small"}
    assert set(decide("slurm", data)[1]) == {"small"}
    assert set(decide("greedy", data)[1]) == {"big"}


def gang_cluster(same_block: bool) -> dict[str, Any]:
    """Rack ra: a1 free, a2 with two tier-3 jobs. Rack rb: b1 free, b2 with one tier-3
    job. A tier-1 gang wants 2 whole nodes."""
    return snapshot(
        [node("a1", block="ra"), node("a2", block="ra"),
         node("b1", block="rb"), node("b2", block="rb")],
        [run("a2-x", 3, {"a2": [0, 1, 2, 3]}), run("a2-y", 3, {"a2": [4, 5, 6, 7]}),
         run("b2-z", 3, {"b2": list(range(8))}),
         pend("gang", 1, 8, nodes=2, same_block=same_block)])


@pytest.mark.parametrize("name", BASELINES)
def test_gang_uses_free_nodes_across_blocks(name: str) -> None:
    victims, placed = decide(name, gang_cluster(same_block=False))
    assert victims == set()
    assert placed == {"gang": {"a1": list(range(8)), "b1": list(range(8))}}


@pytest.mark.parametrize("name", BASELINES)
def test_gang_same_block_picks_the_block_with_fewest_victims(name: str) -> None:
    victims, placed = decide(name, gang_cluster(same_block=True))
    assert victims == {"b2-z"}
    assert placed == {"gang": {"b1": list(range(8)), "b2": list(range(8))}}


def test_multi_node_victim_frees_all_its_gpus_for_later_jobs() -> None:
    """Evicting the 2-node tier-3 gang for ``first`` (on a) also frees its shard on b,
    which the tier-1 ``second`` then uses without a further eviction."""
    data = snapshot(
        [node("a", 4), node("b", 4)],
        [run("wide", 3, {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3]}),
         pend("first", 1, 4, priority=9), pend("second", 1, 4, priority=1)])
    for name in BASELINES:
        victims, placed = decide(name, data)
        assert victims == {"wide"}
        assert placed == {"first": {"a": [0, 1, 2, 3]}, "second": {"b": [0, 1, 2, 3]}}


# ---------------------------------------------------------------- every rule, any input


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", BASELINES)
def test_generated_snapshots_verify(name: str, seed: int) -> None:
    data = generate(nodes=24, seed=seed, occupancy=0.95, pending=10, pools=seed % 2 == 1,
                    multinode_share=0.3, blocks_per=6)
    if seed >= 3:  # tight budgets and a slow storage target
        data["policy"]["max_evictions_per_tick"] = 3
        data["policy"]["max_evicted_gpu_fraction"] = 0.1
        for s in data["storage"]:
            s["write_gb_per_s"] = 2.0
    decide(name, data)


@pytest.mark.parametrize("name", BASELINES)
def test_deterministic(name: str) -> None:
    data = generate(nodes=16, seed=42, occupancy=0.95, pending=8)
    first = plan(data, planner=name).model_dump(exclude={"solver"})
    assert plan(data, planner=name).model_dump(exclude={"solver"}) == first


def _scanning(cls: type) -> type:
    """The baseline as first written: every candidate node scored afresh for every
    job, the best allowed option taken."""
    class Scanning(cls):
        def _best_allowed(self, st, info):
            fresh = [o for ni in info.candidates if (o := self.option(st, info, ni)) is not None]
            fresh.sort(key=self.option_key)
            return next((o for o in fresh if self._allowed(st, list(o.victims))), None)

    return Scanning


@pytest.mark.parametrize("name", ["k8s", "slurm"])
def test_kept_options_give_the_plans_of_a_full_scan(name: str) -> None:
    """Options kept per job shape until their node changes, and options the storm
    limit or a budget refused dropped for good, give the same plans as scoring
    every node for every job, also when the limits bind."""
    limited = 0
    for seed in range(8):
        data = generate(nodes=48, seed=seed, occupancy=0.95, pending=40, multinode_share=0.2,
                        storage_per_blocks=2)
        if seed % 2:  # slow storage: the storm limit binds
            for s in data["storage"]:
                s["write_gb_per_s"] = 2.0
        if seed % 4 == 3:
            data["policy"]["max_evictions_per_tick"] = 6
        problem = build_problem(load_snapshot(data))
        kept = get_baseline(name)(problem)
        full = _scanning(get_baseline(name))(problem)
        a, b = kept.solve(), full.solve()
        assert (a.victims, a.placements) == (b.victims, b.placements)
        assert a.placements  # something to compare
        limited += kept.storm_rejected
    assert limited == 4  # the storm limit refused options in the four slow-storage cases


# ------------------------------------------- kube-scheduler's pickOneNodeForPreemption


K8S_NODE_CASES = {
    # Each case: two 8-GPU nodes, each full of tier-3 victims; a tier-2 job of 8 GPUs
    # (submitted long ago) takes one whole node. The upstream rules in order:
    # 1. the lowest highest-priority victim beats fewer victims: n1 has one victim of
    #    priority 10, n2 two of priority 1; n2's most important victim is less
    #    important (an eviction-count-first rule would take n1)
    "lowest highest-priority victim": (
        [("a", "n1", 8, 10, OLD)], [("b", "n2", 4, 1, OLD), ("c", "n2", 4, 1, OLD)], "n2"),
    # 2. then the smallest sum of priorities: both nodes' most important victim has
    #    priority 10; n1's other victim has 1, n2's 5
    "smallest sum of priorities": (
        [("a", "n1", 4, 10, OLD), ("b", "n1", 4, 1, OLD)],
        [("c", "n2", 4, 10, OLD), ("d", "n2", 4, 5, OLD)], "n1"),
    # 3. then the fewest victims (priorities shifted to be positive: with all at
    #    priority 0, two victims sum to more than one)
    "fewest victims": (
        [("a", "n1", 4, 0, OLD), ("b", "n1", 4, 0, OLD)], [("c", "n2", 8, 0, OLD)], "n2"),
    # 4. then the node whose most important victims started latest
    "latest start": (
        [("a", "n1", 8, 3, "2026-11-30T04:00:00Z")], [("b", "n2", 8, 3, "2026-11-30T06:00:00Z")],
        "n2"),
}


@pytest.mark.parametrize("case", sorted(K8S_NODE_CASES))
def test_k8s_baseline_picks_the_node_as_kube_scheduler_does(case: str) -> None:
    first, second, want = K8S_NODE_CASES[case]
    jobs = [run(j, 3, {n: list(range(8 - g, 8)) if k else list(range(g))}, started=t,
                priority=p)
            for group in (first, second) for k, (j, n, g, p, t) in enumerate(group)]
    jobs.append(pend("t", 2, 8, submitted_at=OLD))
    victims, placed = decide("k8s", snapshot([node("n1"), node("n2")], jobs))
    assert set(placed["t"]) == {want}, case
    assert victims == {j for j, n, *_ in (first + second) if n == want}, case
