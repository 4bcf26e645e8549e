"""Tests of the Kubernetes-style and Slurm-style baselines (planner/heuristics/baseline_k8s.py,
planner/heuristics/baseline_slurm.py), next to the greedy planner they are compared with.

The Kubernetes-style tests follow kube-scheduler's DefaultPreemption
(pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go,
SelectVictimsOnNode; pkg/scheduler/framework/preemption/preemption.go,
pickOneNodeForPreemption); the Slurm-style tests quote the sentence of Slurm's
documentation each one encodes (slurm.conf(5) PreemptParameters, and
preempt.html, "Preemption Design and Operation").

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
from planner.checks.assemble import assemble
from planner.checks.verify import verify
from planner.core.problem import build_problem
from planner.heuristics.baseline_slurm import SlurmPlanner
from planner.heuristics.baselines import get_baseline
from planner.sim.generate import generate

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
    return _outcome(p)


def _outcome(p: Any) -> tuple[set[str], dict[str, dict[str, list[int]]]]:
    victims = {e.job for e in p.evictions}
    placed = {pl.job: {part.node: part.gpus for part in pl.placement} for pl in p.placements}
    return victims, placed


def slurm(data: dict[str, Any], **settings: Any
          ) -> tuple[set[str], dict[str, dict[str, list[int]]]]:
    """``decide`` for the Slurm-style baseline with PreemptParameters ``settings``
    (youngest_first, reorder_count, strict_order)."""
    if not settings:
        return decide("slurm", data)
    snap = load_snapshot(data)
    problem = build_problem(snap)
    p = assemble(problem, SlurmPlanner(problem, **settings).solve(), "feasible",
                 SolverInfo(engine="slurm", status="HEURISTIC"))
    assert verify(snap, p) == [], f"slurm plan breaks rules: {verify(snap, p)}"
    return _outcome(p)


# ---------------------------------------------------------------- node choice


def fewest_vs_cheapest() -> dict[str, Any]:
    """Node a: one tier-3 job costing 2 x 500 = 1000 GPU-s. Node b: two tier-3 jobs
    costing 1 x 100 each (200 in total). A tier-1 job needs 2 GPUs."""
    return snapshot(
        [node("a", 2), node("b", 2)],
        [run("a-one", 3, {"a": [0, 1]}, restore=500),
         run("b-x", 3, {"b": [0]}), run("b-y", 3, {"b": [1]}),
         pend("urgent", 1, 2)])


def test_k8s_takes_the_node_with_fewest_victims() -> None:
    """Equal priorities: the smallest sum of (shifted) priorities is the fewest victims."""
    victims, placed = decide("k8s", fewest_vs_cheapest())
    assert victims == {"a-one"}
    assert placed == {"urgent": {"a": [0, 1]}}


def test_slurm_stops_at_the_first_prefix_that_fits_not_the_fewest_victims() -> None:
    """preempt.html: "the select plugin will simulate the preemption of each job in the
    priority ordered list and test if the job can be started after each preemption.
    Once the job can be started, the higher priority jobs in the preemption queue will
    not be considered, but the jobs to be preempted in the original list may be
    sub-optimal." All three jobs have the same key (tier 3, one node); b-x and b-y
    were submitted first. Removing b-x (1 GPU free on b) then b-y (2) lets the job
    start on b; re-ordering (b-y first, then b-x) needs both again. ``a-one`` alone
    would have done, but it comes later in the list."""
    data = fewest_vs_cheapest()
    submitted = {"b-x": "2026-11-30T01:00:00Z", "b-y": "2026-11-30T01:10:00Z",
                 "a-one": "2026-11-30T01:20:00Z"}
    for j in data["jobs"]:
        if j["id"] in submitted:
            j["submitted_at"] = submitted[j["id"]]
    assert slurm(data) == ({"b-x", "b-y"}, {"urgent": {"b": [0, 1]}})
    # submitted first, a-one is first in the list and alone enough
    data["jobs"][0]["submitted_at"] = "2026-11-30T00:00:00Z"
    assert slurm(data) == ({"a-one"}, {"urgent": {"a": [0, 1]}})


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
    assert decide("slurm", data)[0] == {"t3"}  # tier 3 comes first in its list
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
    then ``hi`` (higher priority); ``lo`` must go (SelectVictimsOnNode: "Sort
    potentialVictims by descending importance, which ensures reprieve of higher
    importance pods first"; importance is priority, then the earlier start). Slurm's
    key ignores the job priority: the tier-3 jobs tie, and ``hi``, submitted first,
    is removed first and is enough."""
    data = snapshot(
        [node("a", 12)],
        [run("mid", 2, {"a": [0, 1, 2, 3]}),
         run("hi", 3, {"a": [4, 5, 6, 7]}, priority=9, started="2026-11-30T07:00:00Z",
             submitted_at="2026-11-30T06:00:00Z"),
         run("lo", 3, {"a": [8, 9, 10, 11]}, priority=1, submitted_at="2026-11-30T03:00:00Z"),
         pend("urgent", 1, 4)])
    assert decide("k8s", data) == ({"lo"}, {"urgent": {"a": [8, 9, 10, 11]}})
    assert decide("slurm", data) == ({"lo"}, {"urgent": {"a": [8, 9, 10, 11]}})
    data["jobs"][1]["submitted_at"] = "2026-11-30T02:00:00Z"  # now hi was first
    assert decide("slurm", data) == ({"hi"}, {"urgent": {"a": [4, 5, 6, 7]}})


def test_slurm_evicts_lowest_tier_first_even_if_older() -> None:
    """Tier-2 ``young2`` and tier-3 ``old3`` share node a: tier 3 goes first.
    preempt_partition_prio.c: the key is the partition's PriorityTier shifted left
    16 bits plus the node count, sorted ascending (here: tier 3 before tier 2)."""
    data = snapshot(
        [node("a", 4)],
        [run("young2", 2, {"a": [0, 1]}, started="2026-11-30T06:30:00Z"),
         run("old3", 3, {"a": [2, 3]}, started="2026-11-29T08:00:00Z"),
         pend("urgent", 1, 2)])
    for name in BASELINES:
        assert decide(name, data) == ({"old3"}, {"urgent": {"a": [2, 3]}})


def test_slurm_ignores_age_unless_youngest_first() -> None:
    """Two tier-3 jobs on node a, equal cost and priority; ``old`` was submitted
    first. The list is sorted by "Partition priority and job size (to favor
    preempting smaller jobs)" (preempt.html): equal keys, so submission order, and
    ``old`` goes. slurm.conf(5), youngest_first: "If set, then the preemption
    sorting algorithm will be changed to sort by the job start times to favor
    preempting younger jobs over older": ``young`` goes. kube-scheduler agrees with
    the latter: an older pod counts as more important, so ``old`` is reprieved
    first and ``young`` is left as the victim."""
    data = snapshot(
        [node("a", 4)],
        [run("old", 3, {"a": [0, 1]}, started="2026-11-30T02:00:00Z",
             submitted_at="2026-11-30T01:00:00Z"),
         run("young", 3, {"a": [2, 3]}, started="2026-11-30T07:00:00Z",
             submitted_at="2026-11-30T01:30:00Z"),
         pend("urgent", 1, 2)])
    assert slurm(data) == ({"old"}, {"urgent": {"a": [0, 1]}})
    assert slurm(data, youngest_first=True) == ({"young"}, {"urgent": {"a": [2, 3]}})
    assert decide("k8s", data) == ({"young"}, {"urgent": {"a": [2, 3]}})


def test_slurm_youngest_first_ignores_the_tier() -> None:
    """youngest_first sorts "by the job start times" alone: a tier-1 job evicts the
    younger tier-2 job before the older tier-3 one (both in its can_preempt); by
    default PriorityTier comes first and tier 3 goes."""
    data = snapshot(
        [node("a", 4)],
        [run("old3", 3, {"a": [0, 1]}, started="2026-11-30T04:00:00Z"),
         run("young2", 2, {"a": [2, 3]}, started="2026-11-30T07:00:00Z"),
         pend("urgent", 1, 2)])
    assert slurm(data) == ({"old3"}, {"urgent": {"a": [0, 1]}})
    assert slurm(data, youngest_first=True) == ({"young2"}, {"urgent": {"a": [2, 3]}})


def test_slurm_prefers_victims_on_fewer_nodes() -> None:
    """On node a, a 1-node tier-3 job and one shard of a younger 2-node tier-3 gang:
    the key adds the node count ("to favor preempting smaller jobs"), so the 1-node
    job goes; with youngest_first the younger gang goes."""
    data = snapshot(
        [node("a", 2), node("c", 1)],
        [run("single", 3, {"a": [0]}, started="2026-11-30T05:00:00Z"),
         run("gang", 3, {"a": [1], "c": [0]}, started="2026-11-30T07:00:00Z"),
         pend("urgent", 1, 1)])
    assert decide("slurm", data) == ({"single"}, {"urgent": {"a": [0]}})
    assert slurm(data, youngest_first=True) == ({"gang"}, {"urgent": {"a": [1]}})


def test_slurm_reorders_the_final_job_first() -> None:
    """Node a: ``small`` (1 GPU, on GPU 0, submitted first) and ``big`` (3 GPUs). A 3-GPU
    job: removing ``small`` is not enough, removing ``big`` too is; the allocation
    (GPUs 0-2) would use both. preempt.html: "the preemption candidates are
    re-ordered with the final job requiring preemption placed first in the list ...
    The process of simulating the preemption of each job in the priority ordered
    list will then be repeated for the final decision": ``big`` first is enough, so
    only ``big`` goes. kube-scheduler reprieves ``small`` and agrees."""
    data = snapshot(
        [node("a", 4)],
        [run("small", 3, {"a": [0]}, submitted_at="2026-11-30T01:00:00Z"),
         run("big", 3, {"a": [1, 2, 3]}, submitted_at="2026-11-30T02:00:00Z"),
         pend("urgent", 1, 3)])
    assert slurm(data) == ({"big"}, {"urgent": {"a": [1, 2, 3]}})
    assert slurm(data, strict_order=True) == ({"big"}, {"urgent": {"a": [1, 2, 3]}})
    assert slurm(data, reorder_count=0) == ({"big"}, {"urgent": {"a": [1, 2, 3]}})
    assert decide("k8s", data) == ({"big"}, {"urgent": {"a": [1, 2, 3]}})


def test_slurm_documented_example_preempts_one_job_for_an_8_node_job() -> None:
    """preempt.html: "to start an 8 node job, the ordered preemption candidates may be
    2 node, 4 node and 8 node. Preempting all three jobs would allow the pending job
    to start, but by reordering the preemption candidates it is possible to start
    the pending job after preempting only one job." Fourteen 1-GPU nodes: ``j2`` on
    n01-n02, ``j4`` on n03-n06, ``j8`` on n07-n14. The first pass removes j2 (2 nodes
    fit), j4 (6), j8 (14) and selects n01-n08, overlapping all three; re-ordered,
    j8 comes first ("In the example above, the 8 node job would be moved to the
    first position in the list") and alone frees n07-n14."""
    nodes = [node(f"n{i:02d}", 1) for i in range(1, 15)]
    jobs = [run("j2", 3, {f"n{i:02d}": [0] for i in (1, 2)}),
            run("j4", 3, {f"n{i:02d}": [0] for i in range(3, 7)}),
            run("j8", 3, {f"n{i:02d}": [0] for i in range(7, 15)}),
            pend("wide", 1, 1, nodes=8)]
    victims, placed = slurm(snapshot(nodes, jobs))
    assert victims == {"j8"}
    assert placed == {"wide": {f"n{i:02d}": [0] for i in range(7, 15)}}


def strict_cluster() -> dict[str, Any]:
    """Nodes a and b (4 GPUs). Tier-3 jobs: x1 on b GPU 0, x2 on b GPU 3, y1 on a GPUs
    0-1 (1 node each, submitted in that order), and the 2-node gang g on a GPUs 2-3
    and b GPUs 1-2 (last in the list: more nodes). A tier-1 job needs 4 GPUs."""
    return snapshot(
        [node("a", 4), node("b", 4)],
        [run("x1", 3, {"b": [0]}, submitted_at="2026-11-30T01:00:00Z"),
         run("x2", 3, {"b": [3]}, submitted_at="2026-11-30T02:00:00Z"),
         run("y1", 3, {"a": [0, 1]}, submitted_at="2026-11-30T03:00:00Z"),
         run("g", 3, {"a": [2, 3], "b": [1, 2]}, submitted_at="2026-11-30T00:00:00Z"),
         pend("urgent", 1, 4)])


def test_slurm_default_reorder_puts_jobs_on_the_selected_nodes_next() -> None:
    """Pass 1 removes x1, x2, y1, g: a and b both fit, a is selected (best fit, then
    name). "re-ordered with the final job requiring preemption placed first in the
    list and all of the other jobs to be preempted ordered by the number of nodes in
    their allocation which overlap the resources selected for the pending job":
    [g, y1, x1, x2]. Pass 2: g, then y1 frees a; pass 3 ([y1, g, x1, x2]) the same.
    Victims g and y1, on a."""
    assert slurm(strict_cluster()) == ({"g", "y1"}, {"urgent": {"a": [0, 1, 2, 3]}})


def test_slurm_strict_order_keeps_the_other_jobs_in_order() -> None:
    """strict_order: "When reordering preemptable jobs, place the most recently tested
    job at the front of the list": [g, x1, x2, y1]. Pass 2: g frees 2 GPUs on each
    node, x1 and x2 complete b first; pass 3 ([x2, g, x1, y1]) frees b again. Victims
    x2, g and x1, on b."""
    assert slurm(strict_cluster(), strict_order=True) == (
        {"g", "x1", "x2"}, {"urgent": {"b": [0, 1, 2, 3]}})


def test_slurm_reorder_count_must_be_a_count() -> None:
    problem = build_problem(load_snapshot(strict_cluster()))
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="reorder_count must be an integer >= 0"):
            SlurmPlanner(problem, reorder_count=bad)


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


def test_gang_same_block_picks_the_block_with_fewest_victims() -> None:
    victims, placed = decide("k8s", gang_cluster(same_block=True))
    assert victims == {"b2-z"}
    assert placed == {"gang": {"b1": list(range(8)), "b2": list(range(8))}}


def test_slurm_gang_same_block_takes_the_first_block_its_list_completes() -> None:
    """Same key for the three jobs, so the list is a2-x, a2-y, b2-z (submission order,
    here the ids). Removing a2-x and a2-y completes rack ra; re-ordering keeps both
    (each alone frees half of a2). Submitted first, b2-z alone completes rack rb."""
    assert slurm(gang_cluster(same_block=True)) == (
        {"a2-x", "a2-y"}, {"gang": {"a1": list(range(8)), "a2": list(range(8))}})
    data = gang_cluster(same_block=True)
    data["jobs"][2]["submitted_at"] = "2026-11-30T00:00:00Z"
    assert slurm(data) == (
        {"b2-z"}, {"gang": {"b1": list(range(8)), "b2": list(range(8))}})


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
            return next((o for o in fresh if self.limits_allow(st, list(o.victims))), None)

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
    # 3. the sum counts "adjusted" priorities (upstream adds MaxInt32+1 to each, "so
    #    that a node with a few pods with negative priority is not picked over a node
    #    with a smaller number of pods with the same negative priority"): with all at
    #    priority 0, two victims sum to more than one. (Rule 4, the fewest victims,
    #    never decides here: at equal highest-priority victims, a node with more
    #    victims always has the larger shifted sum, in this contract's ranges.)
    "sum of adjusted priorities": (
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


@pytest.mark.parametrize("name", ALL)
def test_rolling_budget_counts_no_job_on_a_down_node(name: str) -> None:
    """R15 (docs/format.md section 9): B counts the running jobs that are not ignored,
    and a job with GPUs on a down node is ignored, whatever its tier. Three tier-3 jobs
    on a, b, c and a tier-1 job on the down node dn: R = 3, B = floor(0.5 x 3) = 1, so
    of the two waiting tier-2 jobs one evicts and one waits (counting the tier-1 job,
    B = 2 gave a plan the verifier refused)."""
    data = snapshot(
        [node("a"), node("b"), node("c"), node("dn", state="down")],
        [run("boss", 1, {"dn": list(range(8))}),
         run("t3-a", 3, {"a": list(range(8))}), run("t3-b", 3, {"b": list(range(8))}),
         run("t3-c", 3, {"c": list(range(8))}),
         pend("p1", 2, 8, submitted_at=OLD, priority=2), pend("p2", 2, 8, submitted_at=OLD)],
        policy={"thrash": {"max_fraction": 0.5, "min_evictions": 0, "exempt_tiers": []}})
    victims, placed = decide(name, data)
    assert len(victims) == 1 and set(placed) == {"p1"}
