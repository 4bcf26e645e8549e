"""Ejection moves (planner/heuristics/eject.py).

A deferred job takes the place of a placed job, which is placed again elsewhere;
a placed job of a less important tier may instead stay deferred; a move that
would cost a tier its own GPUs is undone. Every plan here verifies.

Conventions as in test_repack.py: 8-GPU nodes, Monday 2026-11-30 08:00Z, running
jobs started at 04:00 (past every tier's min runtime). ``n1`` has an NVSwitch
(any 8 GPUs connected); ``n2`` has NVLink pairs only, so an 8-GPU job that needs
NVLink cannot run there.
"""

from __future__ import annotations

from typing import Any

import pytest
from snapshot_parts import whole_node_holder as holder

from models import SolverInfo, load_snapshot
from planner import plan
from planner.checks.assemble import assemble
from planner.checks.verify import verify
from planner.core.budget import Budget
from planner.core.decision import Decision, clean, objective_of
from planner.core.problem import build_problem
from planner.heuristics.eject import _Ejector, _shape, eject, upgrade
from planner.heuristics.greedy import GreedyPlanner
from planner.heuristics.repack import repack

NOW = "2026-11-30T08:00:00Z"
OLD = "2026-11-30T04:00:00Z"
PAIRS = [[0, 1], [2, 3], [4, 5], [6, 7]]


def _snap(nodes: list[dict], jobs: list[dict]) -> dict[str, Any]:
    return {"version": 1, "now": NOW, "storage": [], "nodes": nodes, "jobs": jobs, "policy": {}}


def _node(nid: str, nvlink: Any = "nvswitch") -> dict[str, Any]:
    return {"id": nid, "gpus": 8, "block": "b1", "nvlink": nvlink}


def _job(jid: str, priority: int, tier: int = 2, topology: str = "any") -> dict[str, Any]:
    return {"id": jid, "tier": tier, "state": "pending", "gpus_per_node": 8, "nodes": 1,
            "priority": priority, "topology": topology}


def _holder(jid: str, node: str, tier: int = 1) -> dict[str, Any]:
    """A running job on all 8 GPUs of a node (tier 1: never evicted)."""
    return {"id": jid, "tier": tier, "state": "running", "gpus_per_node": 8, "nodes": 1,
            "priority": 50, "started_at": OLD, "checkpoint": {"restore_s": 100},
            "placement": [{"node": node, "gpus": list(range(8))}]}


def _valid(snap: dict[str, Any], problem: Any, d: Decision) -> None:
    p = assemble(problem, d, "feasible", SolverInfo(engine="test", status="TEST"))
    assert verify(load_snapshot(snap), p) == []


def _nodes_of(problem: Any, d: Decision) -> dict[str, list[str]]:
    return {j: [problem.nodes[ni].node.id for ni, _m in parts] for j, parts in d.placements.items()}


def test_a_deferred_job_takes_the_place_of_one_that_can_run_elsewhere() -> None:
    # Both nodes free. The greedy planner takes k (priority 20, needs no NVLink)
    # first, on n1 (ties go to the first node); j (priority 10) needs 8 NVLink-
    # connected GPUs, which only n1 has, and waits: 8 tier-2 GPUs. Ejection: k
    # leaves n1, j goes there, k goes to n2: 16 tier-2 GPUs, priority value
    # 20 x 8 + 10 x 8 = 240, nothing evicted.
    snap = _snap([_node("n1"), _node("n2", PAIRS)],
                 [_job("k", 20), _job("j", 10, topology="nvlink")])
    problem = build_problem(load_snapshot(snap))
    before = clean(problem, GreedyPlanner(problem).solve())
    assert _nodes_of(problem, before) == {"k": ["n1"]}
    after, moves = eject(problem, before)
    assert moves == 1
    assert _nodes_of(problem, after) == {"j": ["n1"], "k": ["n2"]}
    obj = objective_of(problem, after)
    assert obj.admitted_gpus == {"1": 0, "2": 16, "3": 0}
    assert obj.priority_value == 240 and obj.evictions == 0
    _valid(snap, problem, after)


def test_a_less_important_job_gives_way_when_it_cannot_run_elsewhere() -> None:
    # A plan with tier-3 jobs k on n1 (the NVLink node) and m on n3; n2 (pairs) is
    # held by a tier-1 job, which nothing may evict. Tier-2 job j needs n1's NVLink
    # and waits. Ejection: j takes n1 and k, with nowhere to go, is deferred: tier 2
    # gains 8 GPUs, tier 3 loses 8 (objective item 1 ranks tier 2 first). m keeps
    # its place: 0/8/8 GPUs per tier instead of 0/0/16.
    snap = _snap([_node("n1"), _node("n2", PAIRS), _node("n3", PAIRS)],
                 [_job("k", 20, tier=3), _job("m", 20, tier=3), _job("j", 10, topology="nvlink"),
                  _holder("h", "n2")])
    problem = build_problem(load_snapshot(snap))
    n1, n3 = problem.node_index["n1"], problem.node_index["n3"]
    before = Decision(set(), {"k": [(n1, 0xFF)], "m": [(n3, 0xFF)]})
    after, moves = eject(problem, before)
    assert moves == 1
    assert _nodes_of(problem, after) == {"j": ["n1"], "m": ["n3"]}
    assert objective_of(problem, after).admitted_gpus == {"1": 0, "2": 8, "3": 8}
    _valid(snap, problem, after)


def test_a_move_that_costs_the_tier_a_job_as_large_is_undone() -> None:
    # As the first case, but n2 is held by a tier-1 job: k, of j's tier and as
    # large, cannot be placed again, and deferring it would leave tier 2 at 8
    # GPUs. No move; the plan comes back unchanged.
    snap = _snap([_node("n1"), _node("n2", PAIRS)],
                 [_job("k", 20), _job("j", 10, topology="nvlink"), _holder("h", "n2")])
    problem = build_problem(load_snapshot(snap))
    before = clean(problem, GreedyPlanner(problem).solve())
    after, moves = eject(problem, before)
    assert moves == 0 and after is before
    assert _nodes_of(problem, after) == {"k": ["n1"]}


def test_a_moved_job_leaves_the_victims_only_it_used() -> None:
    # n1 (NVLink) is held by tier-3 job v. The plan places k on n1 by evicting v;
    # n2 is free. j needs NVLink.
    # Ejection: k leaves n1 and v is no longer evicted; j evicts v for n1; k goes
    # to the free n2. Victims: {v} (now for j), 16 tier-2 GPUs.
    snap = _snap([_node("n1"), _node("n2", PAIRS)],
                 [_job("k", 20), _job("j", 10, topology="nvlink"), _holder("v", "n1", tier=3)])
    problem = build_problem(load_snapshot(snap))
    n1 = problem.node_index["n1"]
    before = Decision({"v"}, {"k": [(n1, 0xFF)]})
    _valid(snap, problem, before)
    after, moves = eject(problem, before)
    assert moves == 1
    assert _nodes_of(problem, after) == {"j": ["n1"], "k": ["n2"]}
    assert after.victims == {"v"}
    assert objective_of(problem, after).admitted_gpus == {"1": 0, "2": 16, "3": 0}
    _valid(snap, problem, after)



def _two_blockers() -> tuple[dict[str, Any], Any, Decision]:
    """n1 and n2 have an NVSwitch, n3 NVLink pairs only and a tier-1 holder. The plan:
    tier-2 jobs K1 on n1 and K2 on n2 (8 GPUs, any topology, priority 20); tier-2 job
    J (8 GPUs with NVLink, priority 10) deferred."""
    snap = _snap([_node("n1"), _node("n2"), _node("n3", PAIRS)],
                 [_job("K1", 20), _job("K2", 20), _job("J", 10, topology="nvlink"),
                  _holder("h", "n3")])
    problem = build_problem(load_snapshot(snap))
    ix = problem.node_index
    return snap, problem, Decision(set(), {"K1": [(ix["n1"], 0xFF)], "K2": [(ix["n2"], 0xFF)]})


def _spy_instead(ej: _Ejector) -> list[str]:
    """The placed jobs ``ej`` takes out for a deferred job in one-job moves, in order."""
    tried: list[str] = []
    real = ej._instead

    def instead(info: Any, k: str, ni: int) -> Any:
        tried.append(k)
        return real(info, k, ni)

    ej._instead = instead  # type: ignore[method-assign]
    return tried


@pytest.mark.parametrize("skip", [True, False])
def test_a_shape_that_found_no_place_again_is_not_moved_again(
        monkeypatch: pytest.MonkeyPatch, skip: bool) -> None:
    # J's blockers are K1 (n1) and K2 (n2), of one shape. K1 leaves n1, J takes it,
    # and K1 finds no place (n2 is K2's, n3 the tier-1 holder's): undone. K2 would
    # fare the same (n1 back to K1): with SKIP_UNMOVED it is not tried, without it
    # it is, and fails. Either way two tries are counted, nothing moves, and the
    # plan is as it was.
    import planner.heuristics.eject as ej_mod

    monkeypatch.setattr(ej_mod, "SKIP_UNMOVED", skip)
    _, problem, before = _two_blockers()
    tries = [10.0]
    ej = _Ejector(problem, before, tries)
    tried = _spy_instead(ej)
    info = problem.pending["J"]
    blockers = ej._blockers(info)
    assert [k for k, _ni in blockers] == ["K1", "K2"]
    assert ej._move_one(info, blockers, None, may_defer=True) is None
    assert tried == (["K1"] if skip else ["K1", "K2"])
    assert tries == [8.0]
    assert ej.decision().placements == before.placements



@pytest.mark.parametrize("skip", [True, False])
def test_a_placed_job_whose_leaving_cannot_make_room_is_not_moved(
        monkeypatch: pytest.MonkeyPatch, skip: bool) -> None:
    # n1 is held by tier-3 job v, which the plan evicts for tier-2 job K. Tier-3 job J
    # (8 GPUs) may evict nothing (tier 3 preempts no tier). K blocks J on n1, but if K
    # left, v would hold n1 again: J could not take it. With SKIP_HOPELESS the move
    # is not made (no try leaves K), without it K leaves, J finds no option and the
    # move is undone. One try counted either way; the plan is as it was.
    import planner.heuristics.eject as ej_mod

    monkeypatch.setattr(ej_mod, "SKIP_HOPELESS", skip)
    snap = _snap([_node("n1")], [_job("K", 20), _job("J", 10, tier=3),
                                 _holder("v", "n1", tier=3)])
    problem = build_problem(load_snapshot(snap))
    before = Decision({"v"}, {"K": [(problem.node_index["n1"], 0xFF)]})
    _valid(snap, problem, before)
    tries = [10.0]
    ej = _Ejector(problem, before, tries)
    tried = _spy_instead(ej)
    info = problem.pending["J"]
    blockers = ej._blockers(info)
    assert [k for k, _ni in blockers] == ["K"]
    assert ej._move_one(info, blockers, None, may_defer=True) is None
    assert tried == ([] if skip else ["K"])
    assert tries == [9.0]
    assert ej.decision().placements == before.placements and ej.decision().victims == {"v"}

def test_priority_swaps_skip_no_shape_for_an_earlier_failure() -> None:
    # A priority swap places jobs into the GPUs of the job it takes out and goes on
    # from that plan without counting a move, so what found no place before may
    # find one now: _place_moving (the swaps' one-job move) tries every blocker even
    # where _move_one, in ejection's sweeps, would skip them all.
    _, problem, before = _two_blockers()
    ej = _Ejector(problem, before, [10.0])
    info = problem.pending["J"]
    blockers = ej._blockers(info)
    ej.unmoved[(_shape(info), _shape(problem.pending["K1"]))] = ej.moves
    tried = _spy_instead(ej)
    assert ej._move_one(info, blockers, None) is None and tried == []
    assert ej._place_moving(info, None) is None and tried == ["K1", "K2"]

def test_skipping_moves_that_cannot_work_changes_no_deterministic_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The property sweep's random snapshots and generated clusters 95% full: with a
    # number of tries (deterministic), ejection makes the same moves with and
    # without SKIP_UNMOVED and SKIP_HOPELESS, which skip 69 and 377 tries in 7 and 8
    # of the 8 clusters (when this was written; and on 330 other ticks, 35 of them
    # with moves, the same moves too): they save the time of moves that would not
    # work.
    from test_planner_properties import random_snapshot  # (tests/ is on sys.path)

    import planner.heuristics.eject as ej_mod
    from planner.sim.generate import generate

    cases = [random_snapshot(seed) for seed in range(60)]
    cases += [generate(nodes=64, pending=60, seed=seed, multinode_share=0.1, blocks_per=4,
                       storage_per_blocks=2, occupancy=0.95) for seed in range(8)]
    moved = 0
    for data in cases:
        problem = build_problem(load_snapshot(data))
        before = clean(problem, GreedyPlanner(problem).solve())
        outs = []
        for skip in (True, False):
            monkeypatch.setattr(ej_mod, "SKIP_UNMOVED", skip)
            monkeypatch.setattr(ej_mod, "SKIP_HOPELESS", skip)
            after, moves = eject(problem, before, tries=200)
            outs.append((sorted(after.placements.items()), sorted(after.victims), moves))
        assert outs[0] == outs[1]
        moved += outs[0][2] > 0
    assert moved > 0

def test_no_tries_no_moves() -> None:
    # deterministic mode bounds the moves tried, not the clock: with none left the
    # plan comes back as it was (the direct placements need no try, and j has none)
    snap = _snap([_node("n1"), _node("n2", PAIRS)],
                 [_job("k", 20), _job("j", 10, topology="nvlink")])
    problem = build_problem(load_snapshot(snap))
    before = clean(problem, GreedyPlanner(problem).solve())
    after, moves = eject(problem, before, tries=0)
    assert moves == 0 and after is before


def test_the_planner_returns_the_plan_after_ejection(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first case through plan(), with the whole model unbuildable and the
    # optional candidates off: every greedy plan places k on n1 and defers j (8
    # tier-2 GPUs); ejection admits j (16), and the detail says so.
    from planner.solver import cpsat, portfolio

    def no_model(*_a: Any, **_k: Any) -> Any:
        raise portfolio.BuildTimeout

    monkeypatch.setattr(cpsat, "EXTRA_SHARE", 0.0)
    monkeypatch.setattr(portfolio, "CpsatModel", no_model)
    snap = _snap([_node("n1"), _node("n2", PAIRS)],
                 [_job("k", 20), _job("j", 10, topology="nvlink")])
    p = plan(snap, time_limit_s=1.0)
    assert p.objective.admitted_gpus == {"1": 0, "2": 16, "3": 0}
    assert "1 job(s) admitted by ejection moves" in p.solver.detail
    assert {q.job: q.placement[0].node for q in p.placements} == {"j": "n1", "k": "n2"}
    assert verify(load_snapshot(snap), p) == []


def test_deterministic_mode_counts_tries_not_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same case in deterministic mode: ejection is bounded by portfolio.EJECT_TRIES, not by
    # a deadline, so a deadline long past changes nothing and two runs give the same
    # plan; with no tries allowed j stays deferred.
    from planner.solver import cpsat, portfolio

    def no_model(*_a: Any, **_k: Any) -> Any:
        raise portfolio.BuildTimeout

    monkeypatch.setattr(portfolio, "CpsatModel", no_model)
    monkeypatch.setattr(cpsat, "_reserve", lambda problem, limit, det: 10.0 * limit)  # past
    snap = _snap([_node("n1"), _node("n2", PAIRS)],
                 [_job("k", 20), _job("j", 10, topology="nvlink")])
    first = plan(snap, time_limit_s=0.1, deterministic=True)
    assert first.objective.admitted_gpus == {"1": 0, "2": 16, "3": 0}
    assert plan(snap, time_limit_s=0.1, deterministic=True).model_dump_json(
        exclude={"solver"}) == first.model_dump_json(exclude={"solver"})
    monkeypatch.setattr(portfolio, "EJECT_TRIES", 0)
    assert plan(snap, time_limit_s=0.1, deterministic=True).objective.admitted_gpus["2"] == 8


def test_ejection_never_worsens_nor_breaks_a_rule() -> None:
    # Random small snapshots of the property sweep (pools, windows, immunity, backoff,
    # storage targets, budgets, explicit NVLink graphs) and generated clusters with
    # gangs, slow storage targets and, for odd seeds, eviction budgets, each from the
    # plain greedy plan: every result verifies and ranks at least as high as the
    # greedy plan, and the moves do admit jobs on some of them (24 jobs on 11 of
    # the 126 when this was written).
    from test_planner_properties import random_snapshot  # (tests/ is on sys.path)

    from planner.sim.generate import generate

    cases = [random_snapshot(seed) for seed in range(120)]
    for seed in range(6):
        data = generate(nodes=48, pending=40, seed=seed, multinode_share=0.3, blocks_per=4,
                        storage_per_blocks=2)
        if seed % 2:
            data["policy"]["max_evictions_per_tick"] = 6
            data["policy"]["max_evicted_gpu_fraction"] = 0.1
        cases.append(data)
    admitted = 0
    for data in cases:
        snap = load_snapshot(data)
        problem = build_problem(snap)
        before = clean(problem, GreedyPlanner(problem).solve())
        after, moves = eject(problem, before, tries=200)
        assert objective_of(problem, after).key() >= objective_of(problem, before).key()
        p = assemble(problem, after, "feasible", SolverInfo(engine="test", status="TEST"))
        assert verify(snap, p) == []
        admitted += moves
    assert admitted > 0


def _storm_snap(ids: tuple[int, ...] = (1, 2, 3, 4)) -> dict[str, Any]:
    """Storage s writes 1 GB/s, t 10 GB/s; grace max_s 150 s, safety 1. Tier-3 jobs
    hold whole nodes, each with a signal and restore_s 10 unless said: on s, w1 on n1
    (a 10 GB checkpoint but a 100 s barrier: while it flushes, s may take 150 - 100
    = 50 GB in all; cost 8 x (10 + 10) = 160 GPU-s), w2 on n2 and w3 on n3 (60 GB,
    no barrier: 150 GB; cost 8 x (10 + 60) = 560); on t, w4 on n4 (60 GB, restore
    1,000 s: cost 8 x (1,000 + 6) = 8,048). n1-n3 are H100, n4 H200. Pending tier 2,
    8 GPUs each: A (priority 20, any GPU type) and B (priority 10, H100 only).
    ``ids``: the nodes (and their holders) in the snapshot."""
    def node(i: int) -> dict[str, Any]:
        return {"id": f"n{i}", "gpus": 8, "nvlink": "nvswitch", "block": "b1",
                "gpu_type": "H200" if i == 4 else "H100", "storage": "t" if i == 4 else "s"}

    jobs = [holder(i, *{1: (10, 100, 10), 2: (60, 0, 10), 3: (60, 0, 10),
                        4: (60, 0, 1000)}[i]) for i in ids]
    jobs += [_job("A", 20), {**_job("B", 10), "gpu_type": "H100"}]
    return {"version": 1, "now": NOW, "nodes": [node(i) for i in ids], "jobs": jobs,
            "storage": [{"id": "s", "write_gb_per_s": 1.0}, {"id": "t", "write_gb_per_s": 10.0}],
            "policy": {"grace": {"min_s": 10, "max_s": 150, "safety": 1.0}}}


def test_storm_relief_moves_the_job_whose_victim_caps_the_storage() -> None:
    # Greedy: A takes the cheapest victim, w1 on n1 (160). Then B can only evict w2
    # or w3 on s: 10 + 60 = 70 GB, over w1's 50 GB: deferred (8 tier-2 GPUs). No
    # placed job blocks B's GPUs, so a plain ejection move has nothing to move. The
    # storm relief: A, whose victim w1 sets s's cap, leaves; placed again without
    # w1, it takes n2 (w2, 560: n3 ties and comes second, w4 costs 8,048); s may now
    # take 150 GB, and B takes n3 (w3): 120 GB. 16 tier-2 GPUs, priority value
    # 20 x 8 + 10 x 8 = 240, cost 560 + 560 = 1,120 GPU-s, 2 evictions.
    snap = _storm_snap()
    problem = build_problem(load_snapshot(snap))
    before = clean(problem, GreedyPlanner(problem).solve())
    assert _nodes_of(problem, before) == {"A": ["n1"]} and before.victims == {"w1"}
    after, moves = eject(problem, before)
    assert moves == 1
    assert _nodes_of(problem, after) == {"A": ["n2"], "B": ["n3"]}
    assert after.victims == {"w2", "w3"}
    obj = objective_of(problem, after)
    assert obj.admitted_gpus == {"1": 0, "2": 16, "3": 0}
    assert (obj.priority_value, obj.eviction_cost_gpu_s, obj.evictions) == (240, 1120, 2)
    _valid(snap, problem, after)


def test_storm_relief_is_undone_when_the_deferred_job_still_does_not_fit() -> None:
    # Only n1 and n2: relieved of w1, A takes n2 (w2), and B's only node left is
    # n1, where w1 would bring s to 60 + 10 = 70 GB, over its 50 GB. The move is
    # undone: A on n1 again, B deferred. (Nor can the two swap: A on n2 and B on
    # n1 is the same 70 GB.)
    snap = _storm_snap((1, 2))
    problem = build_problem(load_snapshot(snap))
    before = clean(problem, GreedyPlanner(problem).solve())
    assert _nodes_of(problem, before) == {"A": ["n1"]}
    after, moves = eject(problem, before)
    assert moves == 0
    assert _nodes_of(problem, after) == {"A": ["n1"]} and after.victims == {"w1"}


def test_a_failed_storm_relief_is_not_tried_again_for_the_same_shape(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As above (n1, n2 only), with a second job B2 of B's shape. B's relief fails
    # and is undone; nothing changed since, so B2's would fail the same way: it is
    # not tried (one ban and its lift, not two).
    snap = _storm_snap((1, 2))
    snap["jobs"].append({**_job("B2", 10), "gpu_type": "H100"})
    problem = build_problem(load_snapshot(snap))
    before = clean(problem, GreedyPlanner(problem).solve())
    bans: list[set[str]] = []
    real = GreedyPlanner.ban

    def ban(self: GreedyPlanner, st: Any, vs: set[str]) -> None:
        bans.append(set(vs))
        real(self, st, vs)

    monkeypatch.setattr(GreedyPlanner, "ban", ban)
    after, moves = eject(problem, before)
    assert moves == 0 and _nodes_of(problem, after) == {"A": ["n1"]}
    assert bans == [{"w1"}, set()]


def test_single_node_jobs_make_their_quick_moves_before_gangs() -> None:
    # The storm case above with a deferred tier-2 gang G (2 x 8 GPUs, H100, priority
    # 5), in a plan given by hand: A on n1 (w1), B and G deferred. With one try:
    # by size G comes first, and its relief fails (A leaves w1 for n2; G's only pair
    # left, n1 + n3, would flush w1 + w2 + w3 = 130 GB to s, over w1's 50 GB), which
    # spends the try. Single-node jobs go first: B's relief spends it and succeeds as
    # above (A on n2, B on n3; 16 tier-2 GPUs, cost 1,120 GPU-s), and G, out of
    # tries, stays deferred. (Without a limit both orders make B's move: G's fails.)
    snap = _storm_snap()
    snap["jobs"].append({**_job("G", 5), "nodes": 2, "gpu_type": "H100"})
    problem = build_problem(load_snapshot(snap))
    n1 = problem.node_index["n1"]
    before = clean(problem, Decision({"w1"}, {"A": [(n1, 0xFF)]}))
    _valid(snap, problem, before)
    for tries in (1, None):
        after, moves = eject(problem, before, tries=tries)
        assert moves == 1
        assert _nodes_of(problem, after) == {"A": ["n2"], "B": ["n3"]}
        obj = objective_of(problem, after)
        assert obj.admitted_gpus == {"1": 0, "2": 16, "3": 0}
        assert obj.eviction_cost_gpu_s == 1120
        _valid(snap, problem, after)


def test_a_gang_that_keeps_one_block_gets_one_cleared() -> None:
    # Six free 8-GPU nodes: n1 (H100) and n2 (H200) in block b1, n3 (H100) and n4
    # (H200) in b2, n5 (H100) alone in b3, n6 (H200) alone in b4. Tier-1 gangs of
    # 2 x 8 GPUs, largest first, then by priority: K1 (H100, any nodes, priority
    # 30) takes n1 and n3 (free, by node id), K2 (H200, 20) n2 and n4, and J
    # (any type, one block, 10) finds no block with two free nodes: 32 tier-1 GPUs.
    # Moving K1 or K2 alone frees one node per block, not a block. Clearing b1 (its
    # two placed jobs, the fewest of any block where J fits) places J on n1 and n2,
    # then K1 on n3 and n5 and K2 on n4 and n6: 48 tier-1 GPUs.
    def node(i: int, block: str) -> dict[str, Any]:
        return {"id": f"n{i}", "gpus": 8, "nvlink": "nvswitch", "block": block,
                "gpu_type": "H100" if i % 2 else "H200"}

    def gang(jid: str, priority: int, **kw: Any) -> dict[str, Any]:
        return {**_job(jid, priority, tier=1), "nodes": 2, **kw}

    snap = _snap([node(1, "b1"), node(2, "b1"), node(3, "b2"), node(4, "b2"),
                  node(5, "b3"), node(6, "b4")],
                 [gang("K1", 30, gpu_type="H100"), gang("K2", 20, gpu_type="H200"),
                  gang("J", 10, same_block=True)])
    problem = build_problem(load_snapshot(snap))
    before = clean(problem, GreedyPlanner(problem).solve())
    assert _nodes_of(problem, before) == {"K1": ["n1", "n3"], "K2": ["n2", "n4"]}
    after, moves = eject(problem, before)
    assert moves == 1
    assert {j: sorted(n) for j, n in _nodes_of(problem, after).items()} == {
        "J": ["n1", "n2"], "K1": ["n3", "n5"], "K2": ["n4", "n6"]}
    assert objective_of(problem, after).admitted_gpus == {"1": 48, "2": 0, "3": 0}
    _valid(snap, problem, after)


def _chain_snap(copies: int, spare: bool = True) -> dict[str, Any]:
    """``copies`` times: na (H200, NVSwitch), nb (H200, NVLink pairs), nc (H100,
    pairs; only when ``spare``), all free; tier-2 jobs J (8 H200 GPUs with NVLink:
    na only), K (8 H200 GPUs: na or nb) and L (8 GPUs of any type: any of the
    three)."""
    nodes, jobs = [], []
    for c in range(copies):
        nodes += [{**_node(f"n{c}a"), "gpu_type": "H200"},
                  {**_node(f"n{c}b", PAIRS), "gpu_type": "H200"}]
        if spare:
            nodes.append({**_node(f"n{c}c", PAIRS), "gpu_type": "H100"})
        jobs += [{**_job(f"J{c}", 10, topology="nvlink"), "gpu_type": "H200"},
                 {**_job(f"K{c}", 20), "gpu_type": "H200"}, _job(f"L{c}", 30)]
    return _snap(nodes, jobs)


def test_a_chain_of_two_moves_admits_a_job_no_single_move_can() -> None:
    # A plan given by hand: K on na, L on nb, J deferred (16 tier-2 GPUs). Moving K
    # alone frees na for J, but K finds no place (nb is L's, nc is H100) and, of
    # J's tier and as large, may not be deferred: undone. The chain: J takes na, L
    # leaves nb for nc, K takes nb. 24 tier-2 GPUs, priority value
    # (10 + 20 + 30) x 8 = 480, nothing evicted.
    snap = _chain_snap(1)
    problem = build_problem(load_snapshot(snap))
    ix = problem.node_index
    before = Decision(set(), {"K0": [(ix["n0a"], 0xFF)], "L0": [(ix["n0b"], 0xFF)]})
    _valid(snap, problem, before)
    after, moves = eject(problem, before)
    assert moves == 1
    assert _nodes_of(problem, after) == {"J0": ["n0a"], "K0": ["n0b"], "L0": ["n0c"]}
    obj = objective_of(problem, after)
    assert obj.admitted_gpus == {"1": 0, "2": 24, "3": 0}
    assert obj.priority_value == 480 and obj.evictions == 0
    _valid(snap, problem, after)


def test_a_chain_ends_the_sweep_and_the_next_round_makes_the_next() -> None:
    # Two copies of the case above. The first chain found (J0's) ends tier 2's
    # sweep in the first round; the second round makes J1's: 48 tier-2 GPUs.
    # With four tries, only J0's chain: J0's one-job moves spend two (K0, then K1,
    # which may leave n1a for J0; J1, of the same shape, is not tried again), and
    # its chain two: K0 leaves and J0 takes n0a; of the jobs blocking K0, K1 (by
    # id) leaves n1a for K0 but finds no place, undone; L0 goes to n0c and K0 takes
    # n0b: 40 GPUs. With three, none.
    snap = _chain_snap(2)
    problem = build_problem(load_snapshot(snap))
    ix = problem.node_index
    before = Decision(set(), {f"{j}{c}": [(ix[f"n{c}{n}"], 0xFF)]
                              for c in (0, 1) for j, n in (("K", "a"), ("L", "b"))})
    after, moves = eject(problem, before)
    assert moves == 2
    assert objective_of(problem, after).admitted_gpus == {"1": 0, "2": 48, "3": 0}
    assert _nodes_of(problem, after) == {f"{j}{c}": [f"n{c}{n}"] for c in (0, 1)
                                         for j, n in (("J", "a"), ("K", "b"), ("L", "c"))}
    _valid(snap, problem, after)
    after, moves = eject(problem, before, tries=4)
    assert moves == 1
    assert objective_of(problem, after).admitted_gpus == {"1": 0, "2": 40, "3": 0}
    _valid(snap, problem, after)
    assert eject(problem, before, tries=3)[1] == 0
    _valid(snap, problem, after)


def test_a_chain_sweep_gets_a_third_of_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    # The chain case above with a wall-clock budget of 100 s: the sweep searches
    # within a third of the time left when it starts (CHAIN_SHARE), so that the
    # less important tiers' quicker moves keep the rest, and still finds J0's
    # chain (24 tier-2 GPUs). Deterministic mode (no budget, tries) is unchanged.
    import time

    snap = _chain_snap(1)
    problem = build_problem(load_snapshot(snap))
    ix = problem.node_index
    before = Decision(set(), {"K0": [(ix["n0a"], 0xFF)], "L0": [(ix["n0b"], 0xFF)]})
    outer = Budget(100.0)
    seen: list[tuple[float, float] | None] = []  # (its deadline's time left, outer's)
    real_chain = _Ejector.chain

    def chain(self: _Ejector, info: Any, deadline: Any) -> bool:
        now = time.perf_counter()
        seen.append(None if deadline is None else (deadline.end - now, outer.end - now))
        return real_chain(self, info, deadline)

    monkeypatch.setattr(_Ejector, "chain", chain)
    after, moves = eject(problem, before, budget=outer)
    assert moves == 1
    assert objective_of(problem, after).admitted_gpus == {"1": 0, "2": 24, "3": 0}
    times = [x for x in seen if x is not None]
    assert times and len(times) == len(seen)
    assert all(mine <= left / 3 + 1e-6 for mine, left in times)
    assert all(mine > 30 for mine, _left in times)  # (a third of some 100 s)
    seen.clear()
    after, moves = eject(problem, before, tries=100)
    assert moves == 1 and seen and all(x is None for x in seen)


def _spy_chain_leaves(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The jobs that leave their place in chain searches, in order."""
    left: list[str] = []
    real_chain, real_leave = _Ejector.chain, _Ejector._leave

    def chain(self: _Ejector, info: Any, deadline: Any) -> bool:
        def leave(k: str) -> tuple:
            left.append(k)
            return real_leave(self, k)

        self._leave = leave  # type: ignore[method-assign]
        try:
            return real_chain(self, info, deadline)
        finally:
            del self._leave

    monkeypatch.setattr(_Ejector, "chain", chain)
    return left


def test_a_chain_moves_for_a_gang_only_jobs_that_free_enough_of_one_block(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Free 8-GPU nodes: p1 (H200), p2, p3 in block b1; q1, q2 in b2; s1 alone in b4
    # (H100). A plan given by hand: tier-1 gang K (2 x 8 GPUs, one block) on p1 and
    # p2; tier-2 jobs X on q1, Y on q2, Z on p3; tier-2 job J (8 H200 GPUs: p1 only)
    # deferred. Moving K alone fails: no block has two nodes for it. The chain: K
    # leaves and J takes p1; of the jobs that block K, X and Y would each free one
    # node of b2, where K would then have one: not tried. Z frees p3, which with p2
    # makes two in b1: Z goes to s1 and K takes p2 and p3. 16 tier-1 GPUs, 32 tier-2.
    def node(nid: str, block: str, gpu: str = "H100") -> dict[str, Any]:
        return {**_node(nid), "block": block, "gpu_type": gpu}

    snap = _snap([node("p1", "b1", "H200"), node("p2", "b1"), node("p3", "b1"),
                  node("q1", "b2"), node("q2", "b2"), node("s1", "b4")],
                 [{**_job("J", 10), "gpu_type": "H200"}, _job("X", 20), _job("Y", 20),
                  _job("Z", 20),
                  {**_job("K", 30, tier=1), "nodes": 2, "same_block": True}])
    problem = build_problem(load_snapshot(snap))
    ix = problem.node_index
    before = Decision(set(), {"K": [(ix["p1"], 0xFF), (ix["p2"], 0xFF)],
                              "X": [(ix["q1"], 0xFF)], "Y": [(ix["q2"], 0xFF)],
                              "Z": [(ix["p3"], 0xFF)]})
    _valid(snap, problem, before)
    left = _spy_chain_leaves(monkeypatch)
    after, moves = eject(problem, before)
    assert moves == 1 and left == ["K", "Z"]
    assert {j: sorted(n) for j, n in _nodes_of(problem, after).items()} == {
        "J": ["p1"], "K": ["p2", "p3"], "X": ["q1"], "Y": ["q2"], "Z": ["s1"]}
    assert objective_of(problem, after).admitted_gpus == {"1": 16, "2": 32, "3": 0}
    _valid(snap, problem, after)


def test_a_chain_search_does_not_move_a_job_that_found_no_place_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Two copies without nc: K0 on n0a, L0 on n0b, K1 on n1a, L1 on n1b; no chain
    # exists (all four nodes stay taken). J0's search: K0 leaves n0a for J0; the
    # jobs blocking K0, by id, are K1, L0 and L1; each leaves, K0 takes its node,
    # and it finds no place again. Then K1 leaves n1a for J0; of the jobs blocking
    # K1 (K0, L0, L1), only K0 is tried: L0 and L1 found no place already. (J1, of
    # J0's shape, is not searched.) Nothing changes.
    snap = _chain_snap(2, spare=False)
    problem = build_problem(load_snapshot(snap))
    ix = problem.node_index
    before = Decision(set(), {f"{j}{c}": [(ix[f"n{c}{n}"], 0xFF)]
                              for c in (0, 1) for j, n in (("K", "a"), ("L", "b"))})
    left = _spy_chain_leaves(monkeypatch)
    after, moves = eject(problem, before)
    assert moves == 0 and after is before
    assert left == ["K0", "K1", "L0", "L1", "K1", "K0"]


def test_a_priority_swap_places_more_important_jobs_anywhere() -> None:
    # Free nodes n1, n2 (H100) and n3 (H200), all NVSwitch. A plan given by hand:
    # tier-2 gang K (2 x 8 GPUs, priority 1) on n1 and n2; tier-2 job M (8 GPUs,
    # priority 30) on n3; deferred tier-2 jobs J1 (8 GPUs, priority 10) and J2
    # (8 H200 GPUs, priority 20). Priority value 1 x 16 + 30 x 8 = 256. Repacking
    # cannot swap: J2 cannot use K's H100 GPUs, and J1 alone leaves 8 of them
    # unused. The swap: K leaves; J2, most important, takes n3 by moving M to n1;
    # J1 takes n2. The same 24 tier-2 GPUs, priority value
    # 30 x 8 + 20 x 8 + 10 x 8 = 480.
    snap = _snap([{**_node("n1"), "gpu_type": "H100"}, {**_node("n2"), "gpu_type": "H100"},
                  {**_node("n3"), "gpu_type": "H200"}],
                 [{**_job("K", 1), "nodes": 2}, _job("M", 30), _job("J1", 10),
                  {**_job("J2", 20), "gpu_type": "H200"}])
    problem = build_problem(load_snapshot(snap))
    ix = problem.node_index
    before = Decision(set(), {"K": [(ix["n1"], 0xFF), (ix["n2"], 0xFF)],
                              "M": [(ix["n3"], 0xFF)]})
    _valid(snap, problem, before)
    assert repack(problem, before)[1] == 0
    after, swaps = upgrade(problem, before)
    assert swaps == 1
    assert _nodes_of(problem, after) == {"J1": ["n2"], "J2": ["n3"], "M": ["n1"]}
    obj = objective_of(problem, after)
    assert obj.admitted_gpus == {"1": 0, "2": 24, "3": 0} and obj.priority_value == 480
    _valid(snap, problem, after)
    # nothing more important to swap in: no swap
    assert upgrade(problem, after) == (after, 0)


def _trade_snap() -> dict[str, Any]:
    """One 8-GPU node: GPUs 0-3 free, 4-7 held by tier-3 ``r1``; a tier-1 and a tier-2
    job of 4 GPUs pending; the rolling window already holds 4 evictions (R15: B =
    max(4, floor(0.03 x 1)) = 4, nothing left for victims of tiers that are not
    exempt). No nodes kept for tier 1 (``reserve: null``)."""
    snap = _snap([_node("n1")], [
        {"id": "r1", "tier": 3, "state": "running", "gpus_per_node": 4, "nodes": 1,
         "priority": 1, "started_at": OLD, "checkpoint": {"restore_s": 100},
         "placement": [{"node": "n1", "gpus": [4, 5, 6, 7]}]},
        {**_job("t1", 10, tier=1), "gpus_per_node": 4},
        {**_job("t2", 10, tier=2), "gpus_per_node": 4}])
    snap["policy"] = {"reserve": None}
    snap["recent_evictions"] = [{"job": f"x{k}", "at": f"2026-11-30T07:{10 + k}:00Z", "gpus": 1}
                                for k in range(4)]
    return snap


def test_ejection_after_the_trade_keeps_no_move_the_trade_undoes() -> None:
    # The plan: t1 on the free GPUs 0-3, t2 deferred (it may not evict: the window is
    # spent). Plain ejection moves t1 away for t2 (t2 on 0-3, t1 evicts r1: exempt,
    # R15 allows it) and ranks that 4/4 above 4/0. But exempt jobs take free GPUs
    # first (thrash.exempt_free_first): t1 and t2 trade places, r1 then counts
    # against the spent window, so t2 is dropped and r1 spared: 4/0 again, the move
    # undone. Compared after the trade, the round gains nothing: ejection keeps the
    # plan as it was and admits no job.
    from planner.core.decision import exempt_free_first
    snap = _trade_snap()
    pr = build_problem(load_snapshot(snap))
    d = Decision(set(), {"t1": [(0, 0b1111)]})
    raw, n_raw = eject(pr, d, tries=100)
    assert (objective_of(pr, raw).admitted_gpus, raw.victims, n_raw) == (
        {"1": 4, "2": 4, "3": 0}, {"r1"}, 1)
    back, moved = exempt_free_first(pr, raw)
    assert moved == 1
    assert (objective_of(pr, back).admitted_gpus, back.victims, back.placements) == (
        {"1": 4, "2": 0, "3": 0}, set(), {"t1": [(0, 0b1111)]})
    traded, n = eject(pr, d, tries=100, traded=True)
    assert (traded.placements, traded.victims, n) == (d.placements, set(), 0)
    _valid(snap, pr, raw)
    _valid(snap, pr, traded)


def test_priority_swaps_the_trade_undoes_leave_the_ejection_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # n0: r0 (tier 2, 1 GPU, past its immunity) on GPU 0, r3 (tier 3, immune: started
    # 10 minutes ago) on GPUs 1-5, GPUs 6 and 7 free; the window is empty. Pending: a
    # (tier 1), b and c (tier 2), one GPU each. The ejection's plan (no move to make)
    # is a on GPU 7 and c on GPU 6: 1/1 GPUs. Priority swaps that gave a on r0's GPU
    # and b on GPU 7 (1/1 as is) rank 1/0 once traded: a takes b's free GPU 7 and b,
    # whose rights stop at tier 3, cannot have r0's. Eject keeps the ejection's plan
    # and counts no swap.
    from planner.solver import portfolio

    nodes = [_node("n0")]
    jobs = [{"id": "r0", "tier": 2, "state": "running", "gpus_per_node": 1,
             "started_at": OLD,
             "placement": [{"node": "n0", "gpus": [0]}]},
            {"id": "r3", "tier": 3, "state": "running", "gpus_per_node": 5,
             "started_at": "2026-11-30T07:50:00Z",
             "placement": [{"node": "n0", "gpus": [1, 2, 3, 4, 5]}]},
            *({"id": j, "tier": t, "state": "pending", "gpus_per_node": 1,
               "submitted_at": OLD} for j, t in (("a", 1), ("b", 2), ("c", 2)))]
    pr = build_problem(load_snapshot(_snap(nodes, jobs)))
    d = Decision(set(), {"a": [(0, 1 << 7)], "c": [(0, 1 << 6)]})
    swapped = Decision({"r0"}, {"a": [(0, 1 << 0)], "b": [(0, 1 << 7)]})
    monkeypatch.setattr(portfolio, "upgrade", lambda *a, **kw: (swapped, 1))
    for traded, want, swaps in ((True, d, 0), (False, swapped, 1)):
        e = portfolio.Eject(d, traded=traded)
        out = e.run(pr, Budget(5.0, wall=False))
        assert (out.placements, out.victims, e.swaps) == (
            want.placements, want.victims, swaps), traded


def test_swaps_stop_at_their_own_deadline_while_ejection_rounds_go_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Before the whole model, ejection rounds (admissions) may run to their end while
    # the model still has time to be built and solved; the priority swaps after them
    # stop at ``swaps_by`` (planner/solver/cpsat.py, _Run.whole_model)
    from planner.solver import portfolio

    seen: dict[str, float] = {}

    def spy(name: str) -> Any:
        def run(_problem: Any, d: Decision, *, budget: Budget, **_kw: Any) -> Any:
            seen[name] = budget.end
            return d, 0
        return run

    monkeypatch.setattr(portfolio, "eject", spy("eject"))
    monkeypatch.setattr(portfolio, "upgrade", spy("upgrade"))
    pr = build_problem(load_snapshot(_trade_snap()))
    d = Decision(set(), {"t1": [(0, 0b1111)]})
    rounds, swaps = Budget(5.0), Budget(1.0)
    portfolio.Eject(d, swaps_by=swaps).run(pr, rounds)
    assert seen == {"eject": rounds.end, "upgrade": swaps.end}
    # a later swaps_by than the budget's end does not stretch it
    portfolio.Eject(d, swaps_by=Budget(9.0)).run(pr, rounds)
    assert seen == {"eject": rounds.end, "upgrade": rounds.end}


def test_before_the_model_ejection_rounds_get_the_time_the_model_can_spare(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # _trade_snap's node n1 (t1 and t2 pending, 4 GPUs each; r1 on GPUs 4-7; the
    # window spent) and n2, held by tier-3 job r2. The plan that evicts r1 for t1 and
    # puts t2 on the free GPUs (4/4) is traded (exempt jobs take free GPUs first: t1
    # there, t2 would need r1, which the spent window refuses): 4/0, no eviction.
    # Ejection moves on the traded plan come before the whole model; their rounds
    # may go on until the model keeps only its build and a short solve (later than
    # the time the model's full solve leaves), their swaps stop at that earlier end
    from planner.solver import portfolio

    snap = _trade_snap()
    snap["nodes"].append(_node("n2"))
    snap["jobs"].append({**_holder("r2", "n2", tier=3), "priority": 5})
    calls: list[tuple[float, float | None]] = []
    run = portfolio.Eject.run

    def spy(self: Any, problem: Any, budget: Budget) -> Any:
        calls.append((budget.end, None if self.swaps_by is None else self.swaps_by.end))
        return run(self, problem, budget)

    monkeypatch.setattr(portfolio.Eject, "run", spy)
    p = plan(snap, time_limit_s=5.0)
    assert p.objective.admitted_gpus == {"1": 4, "2": 0, "3": 0} and not p.evictions
    assert "moved to free GPUs" in p.solver.detail
    rounds_end, swaps_end = calls[0]
    assert swaps_end is not None and swaps_end < rounds_end


def _kjm() -> tuple[dict[str, Any], dict, Decision, Decision]:
    """n1 (NVSwitch), n2 and n3 (NVLink pairs) free; k (priority 20, any GPUs), j
    (priority 10, needs 8 NVLink GPUs: n1 only) and m (priority 5) pending, 8 GPUs
    each. The snapshot, the greedy plan's placements (k on n1, m on n2: 16 GPUs,
    priority value 200), a baseline's plan (k on n2, j on n1: 16, 240) and the best
    (all three, k on n3: 24, 280)."""
    snap = _snap([_node("n1"), _node("n2", PAIRS), _node("n3", PAIRS)],
                 [_job("k", 20), _job("j", 10, topology="nvlink"), _job("m", 5)])
    problem = build_problem(load_snapshot(snap))
    n1, n2, n3 = (problem.node_index[n] for n in ("n1", "n2", "n3"))
    return (snap, {"k": [(n1, 0xFF)], "m": [(n2, 0xFF)]},
            Decision(set(), {"k": [(n2, 0xFF)], "j": [(n1, 0xFF)]}),
            Decision(set(), {"k": [(n3, 0xFF)], "j": [(n1, 0xFF)], "m": [(n2, 0xFF)]}))


def _eject_stub(starts: list[dict], greedy: dict, best: Decision) -> Any:
    """An ``eject`` that records each start and gives ``best`` from the greedy plan,
    nothing from any other."""
    def stub(_problem: Any, d: Decision, **_kw: Any) -> tuple[Decision, int]:
        starts.append(d.placements)
        return (best, 1) if d.placements == greedy else (d, 0)

    return stub


def _big_without_model(monkeypatch: pytest.MonkeyPatch, *, baseline_runs: float) -> None:
    """A cluster takes a big one's path without the whole model, LNS or squeaky-wheel
    passes; each baseline costs ``baseline_runs`` greedy runs (0: always room)."""
    from planner.solver import cpsat, portfolio

    monkeypatch.setattr(cpsat, "NEIGHBOURHOOD_NODES", 0)
    monkeypatch.setattr(portfolio, "SOLVE_TIMES_EXACT", 1e9)  # the model never fits
    monkeypatch.setattr(cpsat, "LNS_MIN_S", 1e9)
    monkeypatch.setattr(portfolio, "squeaky_wheel", lambda problem, d, **kw: d)
    monkeypatch.setattr(portfolio, "BASELINE_RUNS", {"k8s": baseline_runs,
                                                     "slurm": baseline_runs})


def test_where_a_baseline_ranks_first_ejection_starts_from_the_best_greedy_variant(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # n1 (NVSwitch), n2 and n3 (NVLink pairs) free; k (priority 20, any GPUs), j
    # (priority 10, needs 8 NVLink GPUs: n1 only) and m (priority 5) pending, 8 GPUs
    # each. The greedy plan: k on n1, j waits, m on n2: 16 GPUs, priority value 200.
    # A baseline (the Kubernetes-style one, stubbed) gives k on n2 and j on n1: 16
    # GPUs, 240, ranked first. The cluster takes a big one's path without the whole
    # model (and without LNS and squeaky-wheel passes). Ejection moves (stubbed: from
    # the greedy plan they give all three, k moved to n3: 24 GPUs, 280; from any
    # other plan nothing) run on the greedy plan first, and their plan is returned
    from planner.solver import portfolio

    _big_without_model(monkeypatch, baseline_runs=0.0)
    snap, greedy, baseline, best = _kjm()
    starts: list[dict] = []
    stub = _eject_stub(starts, greedy, best)

    monkeypatch.setattr(portfolio, "eject", stub)
    monkeypatch.setattr(portfolio.Baseline, "run", lambda self, _p, _b: baseline)
    p = plan(snap, time_limit_s=1.0, workers=1)
    assert starts[0] == greedy
    assert p.objective.admitted_gpus == {"1": 0, "2": 24, "3": 0}
    assert p.objective.priority_value == 280
    assert "1 job(s) admitted by ejection moves on the best greedy variant's plan" in (
        p.solver.detail)
    assert verify(load_snapshot(snap), p) == []


def test_where_the_variants_ejection_ranks_first_the_plan_before_it_gets_a_share(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The cluster of the test above and q (priority 1, 8 GPUs) pending too. The greedy
    # plan: k on n1, m on n2, q on n3 (24 GPUs, priority value 208); a baseline
    # (stubbed) gives k on n2, j on n1, q on n3 (24 GPUs, 248), ranked first, and
    # polished (m, priority 5, in q's place on n3: 280). Ejection moves (stubbed) from
    # the greedy plan as it came give k on n3, j on n1, m on n2 (24 GPUs, 280; q
    # waits), as good, kept; from any other plan nothing. The baseline's polished
    # plan, ranked first before, gets its own share of ejection moves next (it may
    # hold what the variant's does not)
    from planner.solver import portfolio

    _big_without_model(monkeypatch, baseline_runs=0.0)
    snap = _snap([_node("n1"), _node("n2", PAIRS), _node("n3", PAIRS)],
                 [_job("k", 20), _job("j", 10, topology="nvlink"), _job("m", 5),
                  _job("q", 1)])
    problem = build_problem(load_snapshot(snap))
    n1, n2, n3 = (problem.node_index[n] for n in ("n1", "n2", "n3"))
    greedy = {"k": [(n1, 0xFF)], "m": [(n2, 0xFF)], "q": [(n3, 0xFF)]}
    baseline = Decision(set(), {"k": [(n2, 0xFF)], "j": [(n1, 0xFF)], "q": [(n3, 0xFF)]})
    best = Decision(set(), {"k": [(n3, 0xFF)], "j": [(n1, 0xFF)], "m": [(n2, 0xFF)]})
    starts: list[dict] = []

    def stub(_problem: Any, d: Decision, **_kw: Any) -> tuple[Decision, int]:
        starts.append(d.placements)
        return (best, 1) if d.placements == greedy else (d, 0)

    monkeypatch.setattr(portfolio, "eject", stub)
    monkeypatch.setattr(portfolio.Baseline, "run", lambda self, _p, _b: baseline)
    p = plan(snap, time_limit_s=1.0, workers=1)
    polished = {"k": [(n2, 0xFF)], "j": [(n1, 0xFF)], "m": [(n3, 0xFF)]}
    assert starts[:2] == [greedy, polished]
    assert p.objective.admitted_gpus == {"1": 0, "2": 24, "3": 0}
    assert p.objective.priority_value == 280
    assert "1 job(s) admitted by ejection moves on the best greedy variant's plan" in (
        p.solver.detail)
    assert verify(load_snapshot(snap), p) == []


@pytest.mark.parametrize("floor_s", [0.0, 1e9])
def test_the_variants_plan_as_it_came_is_ejected_on_first_where_time_allows(
        monkeypatch: pytest.MonkeyPatch, floor_s: float) -> None:
    # The cluster of the tests above, no baseline with room, no squeaky-wheel pass:
    # the greedy plan (k on n1, m on n2) ranks first, and polishing (stubbed) moves k
    # to n3, the same admissions. Ejection moves (stubbed: nothing) start from the
    # greedy plan as it came, in a share of their time, where they have at least
    # VARIANT_EJECT_LEAST_S (scaled) before them (5 s here); with that floor out of
    # reach, from the polished plan alone
    from planner.solver import cpsat, portfolio

    _big_without_model(monkeypatch, baseline_runs=1e9)
    monkeypatch.setattr(cpsat, "VARIANT_EJECT_LEAST_S", floor_s)
    snap = _snap([_node("n1"), _node("n2", PAIRS), _node("n3", PAIRS)],
                 [_job("k", 20), _job("j", 10, topology="nvlink"), _job("m", 5)])
    problem = build_problem(load_snapshot(snap))
    n1, n2, n3 = (problem.node_index[n] for n in ("n1", "n2", "n3"))
    greedy = {"k": [(n1, 0xFF)], "m": [(n2, 0xFF)]}
    moved = {"k": [(n3, 0xFF)], "m": [(n2, 0xFF)]}
    monkeypatch.setattr(portfolio, "polish", lambda _p, d, _b, **_kw: (
        (Decision(set(), dict(moved)), "1 move(s) to idle GPUs") if d.placements == greedy
        else (d, "")))
    starts: list[dict] = []

    def stub(_problem: Any, d: Decision, **_kw: Any) -> tuple[Decision, int]:
        starts.append(d.placements)
        return d, 0

    monkeypatch.setattr(portfolio, "eject", stub)
    monkeypatch.setattr(portfolio, "upgrade", lambda _p, d, **_kw: (d, 0))
    p = plan(snap, time_limit_s=5.0, workers=1)
    # (the variant's plan, as good as the polished one, is kept, and the polished one
    # gets its share in turn)
    if floor_s == 0.0:
        assert starts[:2] == [greedy, moved]
    else:
        assert starts == [moved]
    assert p.objective.admitted_gpus == {"1": 0, "2": 16, "3": 0}
    assert verify(load_snapshot(snap), p) == []


def test_before_a_pruned_model_ejection_starts_from_the_best_greedy_variant(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The cluster and plans of the tests above, where the whole model fits but is
    # pruned (EXACT_PAIRS 0: a heuristic too): the baseline's plan ranks first, and
    # ejection moves (stubbed) run first on the greedy plan, before the model, which
    # the plan they give (all three, 24 GPUs, 280) then hints; solver.detail says so
    from planner.solver import cpsat, portfolio

    monkeypatch.setattr(cpsat, "NEIGHBOURHOOD_NODES", 0)
    monkeypatch.setattr(cpsat, "EXACT_PAIRS", 0)
    monkeypatch.setattr(portfolio, "squeaky_wheel", lambda problem, d, **kw: d)
    monkeypatch.setattr(portfolio, "BASELINE_RUNS", {"k8s": 0.0, "slurm": 0.0})
    snap, greedy, baseline, best = _kjm()
    starts: list[dict] = []
    hints: list[dict] = []
    stub = _eject_stub(starts, greedy, best)

    model_run = portfolio.WholeModel.run

    def spy(self: Any, p: Any, budget: Budget) -> Any:
        hints.append(self.hint.placements)
        return model_run(self, p, budget)

    monkeypatch.setattr(portfolio, "eject", stub)
    monkeypatch.setattr(portfolio.Baseline, "run", lambda self, _p, _b: baseline)
    monkeypatch.setattr(portfolio.WholeModel, "run", spy)
    p = plan(snap, time_limit_s=5.0, workers=1)
    assert starts[0] == greedy
    assert hints == [best.placements]
    assert p.objective.admitted_gpus == {"1": 0, "2": 24, "3": 0}
    assert p.objective.priority_value == 280
    assert ("1 job(s) admitted by ejection moves on the best greedy variant's plan before "
            "the model") in p.solver.detail
    assert verify(load_snapshot(snap), p) == []


def test_ejection_on_a_cut_runs_plan_keeps_what_that_run_did_not_reach() -> None:
    # The greedy run whose plan the ejection starts from was cut short: the jobs it
    # did not reach, or let take only free GPUs, stay so for the plan's explanations
    # (plan() takes away those the ejection placed)
    from planner.solver import portfolio

    origin = portfolio.Greedy({"spare_lower": True})
    origin.unreached, origin.free_only = frozenset({"a"}), frozenset({"b"})
    e = portfolio.Eject(Decision(), origin=origin)
    assert (e.keeps, e.unreached, e.free_only) == ("as good", {"a"}, {"b"})
    assert portfolio.Eject(Decision()).unreached == frozenset()


def test_no_chains_where_the_trade_undoes_some_of_a_tier_that_still_gains(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # _trade_snap's n1 and a second such node n2 (GPUs 0-3 free, 4-7 held by tier-3
    # r2); t2 is joined by t2b, both 4 GPUs of tier 2; the window is spent (B = 4).
    # From t1 on n1's free GPUs with both tier-2 jobs deferred, the quick sweeps place
    # t2 (priority 10) on n2's free GPUs at once, and t2b by moving t1 onto r1's GPUs
    # (an exempt eviction): 4/8 GPUs. Exempt jobs take free GPUs first: t1 trades
    # places with t2b, which may not evict r1 in the spent window: 4/4 once traded
    # (t1 on n1's GPUs 0-3, t2 on n2's), 4 tier-2 GPUs more than the round's plan. The round is kept and the next one starts from
    # the plan after the trade, so the tier's chains (slow, and their moves undone
    # the same way) are not tried in this round; where the trade leaves the tier
    # nothing more (_trade_snap alone: t2 dropped again, 4/0), they are.
    from planner.heuristics import eject as ej_mod
    from planner.heuristics.greedy import job_order

    chained: list[str] = []
    real = _Ejector.chain

    def spy(self: Any, info: Any, budget: Any) -> bool:
        chained.append(info.job.id)
        return real(self, info, budget)

    monkeypatch.setattr(_Ejector, "chain", spy)
    snap = _trade_snap()
    snap["nodes"].append(_node("n2"))
    snap["jobs"] += [{**snap["jobs"][0], "id": "r2", "placement": [{"node": "n2",
                                                                    "gpus": [4, 5, 6, 7]}]},
                     {**_job("t2b", 9, tier=2), "gpus_per_node": 4}]
    pr = build_problem(load_snapshot(snap))
    d = Decision(set(), {"t1": [(0, 0b1111)]})
    out, n = ej_mod._round(pr, d, job_order(pr), None, [100.0], True)
    assert chained == []
    assert objective_of(pr, out).admitted_gpus == {"1": 4, "2": 4, "3": 0}
    assert out.victims == set() and n == 1
    assert out.placements == {"t1": [(0, 0b1111)], "t2": [(1, 0b1111)]}
    _valid(snap, pr, out)
    # the whole ejection: the next round (its chains tried for t2b, deferred) finds
    # nothing more
    whole, _n = eject(pr, d, tries=100, traded=True)
    assert (whole.placements, whole.victims) == (out.placements, out.victims)
    assert chained == ["t2b"]
    # _trade_snap alone: the trade undoes t2 and the tier gains nothing: chains tried
    chained.clear()
    pr1 = build_problem(load_snapshot(_trade_snap()))
    ej_mod._round(pr1, d, job_order(pr1), None, [100.0], True)
    assert chained == ["t2"]
