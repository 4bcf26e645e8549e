"""Regressions of the CP-SAT model, named after the bug."""

from __future__ import annotations

import re
from typing import Any

import pytest

from models import load_snapshot
from planner import plan
from planner.checks.verify import verify
from planner.sim.generate import generate


def _greedy_objectives(data: dict[str, Any]) -> tuple[Any, Any]:
    """Objectives of the plain and the spare_lower greedy plans of a snapshot."""
    from models import load_snapshot
    from planner.core.decision import clean, objective_of
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner

    pr = build_problem(load_snapshot(data))
    return tuple(objective_of(pr, clean(pr, GreedyPlanner(pr, spare_lower=s).solve()))
                 for s in (False, True))


def test_phase_weights_do_not_overflow_model_invalid() -> None:
    # Weighted phases spanning up to 2**60 made CP-SAT reject the model as a
    # possible integer overflow (MODEL_INVALID) on this generated snapshot, and
    # phase values read back as doubles lost precision above 2**53.
    data = generate(nodes=64, pending=20, seed=0)
    p = plan(data, time_limit_s=5.0, deterministic=True)
    assert p.solver.engine == "cp-sat"
    assert "MODEL_INVALID" not in p.solver.status
    assert p.status in ("optimal", "feasible")
    from models import load_snapshot

    assert verify(load_snapshot(data), p) == []


def test_spare_lower_greedy_leaves_tier3_victims_to_pending_tier2() -> None:
    # One tier-1 8-GPU job and one tier-2 8-GPU job are pending. Node a holds a
    # tier-2 job (cost 8 x 100 = 800 GPU-s), node b a tier-3 job (8 x 10 = 80).
    # Plain greedy lets tier 1 take the cheap tier-3 node b; tier 2 (which may only
    # evict tier 3) then finds nothing. Sparing b for tier 2 admits both:
    # tier 1 evicts the tier-2 job on a (800), tier 2 evicts the tier-3 job on b (80).
    def job(jid: str, tier: int, node: str | None, restore: float) -> dict:
        j = {"id": jid, "tier": tier, "gpus_per_node": 8,
             "checkpoint": {"restore_s": restore}}
        if node is None:
            return {**j, "state": "pending"}
        return {**j, "state": "running", "started_at": "2026-11-29T00:00:00Z",
                "placement": [{"node": node, "gpus": list(range(8))}]}

    data = {"version": 1, "now": "2026-11-29T08:00:00Z",
            "nodes": [{"id": "a", "gpus": 8}, {"id": "b", "gpus": 8}],
            "jobs": [job("run-t2", 2, "a", 100), job("run-t3", 3, "b", 10),
                     job("new-t1", 1, None, 0), job("new-t2", 2, None, 0)]}
    plain, spare = _greedy_objectives(data)
    assert plain.admitted_gpus == {"1": 8, "2": 0, "3": 0}
    assert spare.admitted_gpus == {"1": 8, "2": 8, "3": 0}
    assert spare.eviction_cost_gpu_s == 880.0
    p = plan(data, deterministic=True)
    assert p.status == "optimal"
    assert p.objective.admitted_gpus == {"1": 8, "2": 8, "3": 0}
    assert sorted((e.job, e.preemptors[0]) for e in p.evictions) == [
        ("run-t2", "new-t1"), ("run-t3", "new-t2")]


def test_spare_lower_greedy_leaves_free_gpus_to_lower_tiers() -> None:
    # Node a is free (8 GPUs); node b holds an evictable tier-2 job (8 x 50 = 400
    # GPU-s). Pending: one tier-1 and one tier-2 8-GPU job. Taking the free node for
    # tier 1 (cost 0) leaves tier 2 nothing (it may not evict tier 2). Sparing free
    # GPUs for the lower tier admits both: tier 1 evicts the tier-2 job on b (400),
    # tier 2 takes the free node a: the contract objective's optimum, which
    # thrash.exempt_free_first: false returns. By default the tier-1 job takes the
    # free node instead (the pending tier-2 job would otherwise displace the running
    # one through tier 1's exemption, where its own rights stop at tier 3): run-t2
    # keeps running and new-t2 waits.
    data = {"version": 1, "now": "2026-11-29T08:00:00Z",
            "nodes": [{"id": "a", "gpus": 8}, {"id": "b", "gpus": 8}],
            "jobs": [
                {"id": "run-t2", "tier": 2, "state": "running", "gpus_per_node": 8,
                 "started_at": "2026-11-29T00:00:00Z", "checkpoint": {"restore_s": 50},
                 "placement": [{"node": "b", "gpus": list(range(8))}]},
                {"id": "new-t1", "tier": 1, "state": "pending", "gpus_per_node": 8},
                {"id": "new-t2", "tier": 2, "state": "pending", "gpus_per_node": 8}]}
    plain, spare = _greedy_objectives(data)
    assert plain.admitted_gpus == {"1": 8, "2": 0, "3": 0}
    assert spare.admitted_gpus == {"1": 8, "2": 8, "3": 0}
    assert spare.eviction_cost_gpu_s == 400.0
    p = plan(data, deterministic=True)
    assert p.status == "feasible" and not p.evictions
    assert {pl.job: pl.placement[0].node for pl in p.placements} == {"new-t1": "a"}
    off = plan({**data, "policy": {"thrash": {"exempt_free_first": False}}},
               deterministic=True)
    assert off.status == "optimal"
    assert off.objective.admitted_gpus == {"1": 8, "2": 8, "3": 0}
    placed = {pl.job: pl.placement[0].node for pl in off.placements}
    assert placed == {"new-t1": "b", "new-t2": "a"}


def test_storm_priced_greedy_keeps_storm_budget_for_a_second_job() -> None:
    # Storage fs writes 1 GB/s; grace max 180 s, safety 2, no barrier or cleanup:
    # need = 2 x F / 1 <= 180 allows F <= 90 GB. Tier-3 victims with a signal, one per
    # 8-GPU node: v1 80 GB (restore 10: cost 8 x (10 + 80) = 720), v2 60 GB (8 x (40 +
    # 60) = 800), v3 30 GB (8 x (80 + 30) = 880). Tier-1 jobs a (8 GPUs, priority 20)
    # and b (8, priority 10). Cost first, a takes v1 (F = 80) and b fits with neither
    # v2 (140) nor v3 (110). Pricing each GB flushed to fs (1e4 GPU-s/GB) makes a take
    # v3 (F = 30), and b then takes v2 (F = 90 <= 90). The only pair within 90 GB is
    # {v2, v3}.
    # Tier-1 job c (4 GPUs, priority 5) fits only on the 4-GPU nodes n4 and n5 of
    # storage fs2 (100 GB/s, never full: F <= 9,000 GB): w1 500 GB (cost 4 x (10 + 5)
    # = 60) or w2 10 GB (4 x (100 + 0.1) = 400.4). Only fs, where the limit refused a
    # victim, is priced, so c still takes the cheap w1; pricing fs2 too would take w2.
    # Optimal: all three jobs (20 tier-1 GPUs) for 800 + 880 + 60 = 1,740 GPU-s; fs
    # flushes 90 GB in 90 s (grace 2 x 90 = 180), fs2 500 GB in 5 s (grace min 60).
    from models import load_snapshot
    from planner.core.decision import clean, objective_of
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner
    from planner.solver.cpsat import STORM_PRICE

    def victim(jid: str, node: str, gpus: int, size: float, restore: float) -> dict:
        return {"id": jid, "tier": 3, "state": "running", "gpus_per_node": gpus,
                "started_at": "2026-11-29T00:00:00Z",
                "checkpoint": {"size_gb": size, "restore_s": restore, "signal": "SIGTERM"},
                "placement": [{"node": node, "gpus": list(range(gpus))}]}

    def pending(jid: str, gpus: int, priority: int) -> dict:
        return {"id": jid, "tier": 1, "state": "pending", "gpus_per_node": gpus,
                "priority": priority}

    data = {"version": 1, "now": "2026-11-29T08:00:00Z",
            "storage": [{"id": "fs", "write_gb_per_s": 1.0},
                        {"id": "fs2", "write_gb_per_s": 100.0}],
            "nodes": [{"id": n, "gpus": 8, "storage": "fs"} for n in ("n1", "n2", "n3")]
            + [{"id": n, "gpus": 4, "storage": "fs2"} for n in ("n4", "n5")],
            "jobs": [victim("v1", "n1", 8, 80, 10), victim("v2", "n2", 8, 60, 40),
                     victim("v3", "n3", 8, 30, 80), victim("w1", "n4", 4, 500, 10),
                     victim("w2", "n5", 4, 10, 100),
                     pending("a", 8, 20), pending("b", 8, 10), pending("c", 4, 5)],
            "policy": {"grace": {"min_s": 60, "max_s": 180, "safety": 2}}}
    pr = build_problem(load_snapshot(data))
    first = GreedyPlanner(pr, spare_lower=True)
    cost_first = clean(pr, first.solve())
    assert first.storm_rejected and first.full_storages == {"fs"}
    assert cost_first.victims == {"v1", "w1"}
    assert objective_of(pr, cost_first).admitted_gpus == {"1": 12, "2": 0, "3": 0}
    priced = clean(pr, GreedyPlanner(pr, spare_lower=True, storm_price=STORM_PRICE,
                                     priced=frozenset({"fs"})).solve())
    assert priced.victims == {"v2", "v3", "w1"}
    assert objective_of(pr, priced).eviction_cost_gpu_s == 1740.0
    everywhere = clean(pr, GreedyPlanner(pr, spare_lower=True, storm_price=STORM_PRICE).solve())
    assert everywhere.victims == {"v2", "v3", "w2"}
    p = plan(data, deterministic=True)
    assert p.status == "optimal"
    assert p.objective.admitted_gpus == {"1": 20, "2": 0, "3": 0}
    assert p.objective.eviction_cost_gpu_s == 1740.0
    assert sorted(e.job for e in p.evictions) == ["v2", "v3", "w1"]
    assert [(s.storage, s.flush_gb, s.flush_s) for s in p.storm] == [
        ("fs", 90.0, 90.0), ("fs2", 500.0, 5.0)]
    assert {e.job: e.grace_s for e in p.evictions} == {"v2": 180.0, "v3": 180.0, "w1": 60.0}


def test_plan_restores_the_garbage_collector_setting() -> None:
    # plan() pauses the cyclic garbage collector while it works and restores the
    # caller's setting, enabled or not, even when it raises
    import gc

    data = generate(nodes=4, pending=2, seed=1)
    assert gc.isenabled()
    plan(data, time_limit_s=0.5)
    assert gc.isenabled()
    gc.disable()
    try:
        plan(data, time_limit_s=0.5)
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ValueError, match="unknown planner"):
        plan(data, planner="nope")
    assert gc.isenabled()


@pytest.mark.parametrize("kw,said", [
    ({"time_limit_s": float("nan")}, "time_limit_s must be a positive number of seconds, got nan"),
    ({"time_limit_s": 0}, "time_limit_s must be a positive number of seconds, got 0"),
    ({"time_limit_s": -1.0}, "time_limit_s must be a positive number of seconds, got -1.0"),
    ({"workers": 0}, "workers must be at least 1, got 0"),
])
def test_plan_refuses_a_meaningless_budget_or_worker_count(kw: dict, said: str) -> None:
    # These used to return the greedy plan as a fallback (NaN, 0, -1 s) or let CP-SAT
    # pick its own worker count (0): the caller's mistake went unnoticed.
    with pytest.raises(ValueError) as exc:
        plan(generate(nodes=4, pending=2, seed=1), **kw)
    assert str(exc.value) == said


def test_no_time_for_the_model_returns_the_greedy_plan_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A budget too short to build and solve the model: the planner returns the spare
    # greedy plan, polished (planner/heuristics/repack.py), with status fallback and solver
    # status SKIPPED; it says how much more time CP-SAT would need, and the plan is
    # valid. A 1 ms budget is below any floor; the first greedy run and the passes
    # still get their least times (cpsat.first_least_s() and the like, scaled by the
    # machine's speed factor), which a machine slowed down by other work may not
    # hold at the benchmark machine's factor: planned as on a machine four times
    # slower, the 32-node plan is whole (8 of 8 tries with three busy processes on
    # two cores, where the benchmark factor failed 8 of 11).
    monkeypatch.setenv("PREEMPT_PLANNER_SPEED", "4")  # (speed.MAX_FACTOR)
    from models import load_snapshot
    from planner.core.decision import clean, objective_of
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner
    from planner.heuristics.repack import polish

    data = generate(nodes=32, pending=12, seed=3)
    data["policy"]["thrash"] = None  # no eviction budget (with one, ejection moves run too)
    p = plan(data, time_limit_s=0.001)
    assert p.status == "fallback"
    assert p.solver.status == "SKIPPED"
    assert "would let CP-SAT solve the whole model" in p.solver.detail
    assert verify(load_snapshot(data), p) == []
    pr = build_problem(load_snapshot(data))
    polished, said = polish(pr, clean(pr, GreedyPlanner(pr, spare_lower=True).solve()))
    assert p.objective == objective_of(pr, polished)
    # (a slow run may add that it went over the limit, see the next test, or what
    # loading, the problem and the checks took of it: planner.FLOOR_SHARE)
    assert re.split(r"; (?:took |\d+\.\d\d s of the time limit)", p.solver.detail)[0].endswith(
        f"greedy plan returned after {said}" if said else "greedy plan returned")
    assert p.objective.key() >= _greedy_objectives(data)[1].key()


def test_greedy_first_bounds_equal_the_per_node_bounds() -> None:
    """The greedy heap's first bounds come from tables of the snapshot's state shared
    by every job shape; they must equal ``_bound`` node by node, for every variant
    (a shortcut that drifted from ``_bound`` would silently change greedy plans)."""
    from models import load_snapshot
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner, GreedyState, job_order

    problem = build_problem(load_snapshot(generate(nodes=48, pending=30, seed=5,
                                                   multinode_share=0.2)))
    shapes = 0
    for kw in ({}, {"spare_lower": True}, {"spare_lower": True, "storm_price": 1e4}):
        g = GreedyPlanner(problem, **kw)
        st = GreedyState(free={n.idx: n.free for n in problem.nodes if n.free})
        order = job_order(problem)
        for k, info in enumerate(order):
            # compare in the state the greedy is in when it meets the job (some nodes
            # changed already), then place the job as the greedy would
            for later in order[k:]:
                want = sorted(b for ni in later.candidates
                              if (b := g._bound(st, later, ni)) is not None)
                assert g._first_bounds(st, later) == want, (k, later.job.id)
                shapes += bool(want)
            g.place(st, info)
        assert st.victims and st.version  # the comparison saw evicted and changed nodes
    assert shapes >= 900  # (bounds by the GPUs missing leave out nodes no victims fill)


def test_grouped_gang_options_equal_fresh_node_options() -> None:
    """Gangs that keep one block score every candidate node; the greedy keeps those
    options per job shape and node until the node changes. Every kept option must
    equal a fresh ``node_option`` in the state the greedy is in when it meets the
    gang, for every variant, on a cluster where the storm limit binds hard (grace
    ``max_s`` 60 s, slow storage), so that kept options the limit no longer allows
    are caught."""
    from models import load_snapshot
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner, GreedyState, job_order

    snap = generate(nodes=64, pending=60, seed=3, multinode_share=0.4)
    snap["policy"]["grace"] = {"min_s": 30, "max_s": 60, "safety": 1.0}
    for s in snap["storage"]:  # about 30 s x 4 GB/s = 120 GB of flushes per target
        s["write_gb_per_s"] = 4.0
    problem = build_problem(load_snapshot(snap))
    checked = rejected = 0
    for kw in ({}, {"spare_lower": True}, {"spare_lower": True, "storm_price": 1e4}):
        g = GreedyPlanner(problem, **kw)
        st = GreedyState(free={n.idx: n.free for n in problem.nodes if n.free})
        for info in job_order(problem):
            if info.job.nodes > 1 and info.job.same_block:
                for ni in info.candidates:
                    kept = g._grouped_option(st, info, ni)
                    assert kept == g.node_option(st, info, ni), (info.job.id, ni)
                    checked += 1
            g.place(st, info)
        rejected += g.storm_rejected
    assert checked >= 500
    assert rejected  # the storm limit refused victims in at least one variant


def _fresh_best_group(g, st, info):  # type: ignore[no-untyped-def]
    """The gang search by a full scan: every candidate node scored afresh, grouped,
    every group tried; the cheapest (ties by key)."""
    options = []
    for ni in info.candidates:
        opt = g.node_option(st, info, ni)
        if opt is not None:
            options.append((opt[0], opt[2], ni, opt[5]))
    options.sort(key=lambda o: (o[0], len(o[3]), o[1], g.p.nodes[o[2]].node.id))
    groups: dict = {}
    for o in options:
        groups.setdefault(g.group_key(info, o[2]), []).append(o)
    n = info.job.nodes
    for pick in (g._together, g._rescued):  # the rescue only where no group fits
        found = [(sum(o[0] for o in opts), str(k), opts) for k, grp in groups.items()
                 if (opts := pick(st, grp, n)) is not None]
        if found:
            return min(found, key=lambda c: c[:2])
    return None


def test_gang_group_search_equals_a_full_scan() -> None:
    """A gang that keeps one block takes the cheapest group whose nodes' victims stay
    within the limits together. The greedy keeps each shape's options by group from
    one gang to the next (bounds first, scored when their group is a candidate,
    checked against the limits again); its choice must equal a full scan's (every
    node scored afresh) in the state the greedy is in when it meets each gang, for
    every variant, where the storm limit binds hard (grace max_s 60 s, slow
    storage) and where an eviction budget does. The groups are taken by bounds: a
    node's bound (the least weight of victims that free the GPUs it misses) must
    never exceed its option, tried on options of two victims or more."""
    from models import load_snapshot
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner, GreedyState, job_order

    checked = refused = bounded = 0
    for seed, budget in ((3, None), (4, None), (6, None), (5, 6)):
        snap = generate(nodes=64, pending=60, seed=seed, multinode_share=0.4, blocks_per=4)
        snap["policy"]["grace"] = {"min_s": 30, "max_s": 60, "safety": 1.0}
        snap["policy"]["max_evictions_per_tick"] = budget
        for s in snap["storage"]:
            s["write_gb_per_s"] = 4.0
        problem = build_problem(load_snapshot(snap))
        for kw in ({}, {"spare_lower": True}, {"spare_lower": True, "storm_price": 1e4}):
            g = GreedyPlanner(problem, **kw)
            st = GreedyState(free={n.idx: n.free for n in problem.nodes if n.free})
            for info in job_order(problem):
                g.placing(info)
                for ni in info.candidates:  # a node's bound never exceeds its option
                    b, o = g._bound(st, info, ni), g.node_option(st, info, ni)
                    assert o is None or (b is not None and b[:3] <= o[:3]), (info.job.id, ni)
                    bounded += o is not None and o[1] > 1
                if info.job.nodes > 1 and info.job.same_block:
                    want = _fresh_best_group(g, st, info)
                    got = g._best_group(st, info)
                    assert got == want, (seed, kw, info.job.id)
                    checked += 1
                g.place(st, info)
            refused += g.refusals > 0
    assert checked >= 60 and bounded >= 50
    assert refused >= 9  # the limits refused options in most runs


def test_a_late_plan_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # A plan later than its time limit by more than OVER_S says so at the end of
    # solver.detail (with its wall time, where it went, and the machine's speed factor, 1 in the
    # tests: planner/solver/speed.py); deterministic plans, whose budget is not wall
    # time, never do. OVER_S = -1 makes every plan late, whatever the machine.
    import planner

    data = generate(nodes=16, pending=4, seed=1)
    monkeypatch.setattr(planner, "OVER_S", -1.0)
    p = plan(data, time_limit_s=0.5)
    import re

    said = re.search(r"took (\d+\.\d\d) s, over the time limit of 0\.5 s: (\d+\.\d\d) s "
                     r"loading the snapshot and building the problem, (\d+\.\d\d) s planning, "
                     r"(\d+\.\d\d) s checking the plan \(too short for this cluster: see "
                     r"'Choosing time_limit_s' in the README; this machine's speed factor "
                     r"1\.00\)$", p.solver.detail)
    # (the times are rounded to 2 decimals there and to 4 in wall_s); the three parts
    # add up to the whole
    assert said is not None and abs(float(said.group(1)) - p.solver.wall_s) <= 0.006
    parts = [float(said.group(i)) for i in (2, 3, 4)]
    assert abs(sum(parts) - float(said.group(1))) <= 0.016
    assert "over the time limit" not in (plan(data, time_limit_s=0.5,
                                             deterministic=True).solver.detail or "")
    assert "over the time limit" not in (plan(data, time_limit_s=0.5,
                                             planner="greedy").solver.detail or "")
    monkeypatch.setattr(planner, "OVER_S", 1e9)
    assert "over the time limit" not in plan(data, time_limit_s=0.5).solver.detail


def _sixty_gb_holders(n: int) -> list[dict[str, Any]]:
    """Tier-3 jobs v1..vn, each holding all 8 GPUs of node n1..nn, with a 60 GB
    checkpoint (barrier and cleanup 0 s)."""
    ck = {"size_gb": 60.0, "signal": "SIGTERM", "barrier_s": 0, "cleanup_s": 0,
          "restore_s": 100}
    return [{"id": f"v{i}", "tier": 3, "priority": 1, "state": "running", "gpus_per_node": 8,
             "topology": "any", "started_at": "2026-11-30T04:00:00Z", "checkpoint": ck,
             "placement": [{"node": f"n{i}", "gpus": list(range(8))}]} for i in range(1, n + 1)]


def test_kept_gang_options_are_checked_against_the_storm_limit_again() -> None:
    """Four 8-GPU nodes on one storage target writing 1 GB/s, blocks b1 (n1, n2) and
    b2 (n3, n4); on each node a tier-3 job (v1-v4) with a 60 GB checkpoint (barrier
    and cleanup 0 s). Grace max_s 150 s with safety 1 lets the target flush 150 GB
    this tick: two victims (120 GB), not four (240 GB). Tier-2 gangs A (priority 20)
    and B (10) each need 2 whole nodes of one block. A goes first and scores all
    four nodes (evict v1, ..., v4, 60 GB each), takes b1 and evicts v1 and v2
    (120 GB). For B the options kept for n3 and n4 (evict v3, v4) are no longer
    allowed: 120 + 60 > 150 GB. They must be scored again (None), and B deferred:
    16 tier-2 GPUs. CP-SAT agrees, and explains B by the storm limit. When A is
    taken out again with its victims, the load falls to 0 and n3 and n4 can host
    B's shards again (evict v3, v4)."""
    from models import load_snapshot
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner, GreedyState, job_order

    now = "2026-11-30T08:00:00Z"
    nodes = [{"id": f"n{i}", "gpus": 8, "nvlink": "nvswitch", "block": "b1" if i < 3 else "b2",
              "storage": "s", "local_write_gb_per_s": 100.0} for i in range(1, 5)]
    jobs = _sixty_gb_holders(4)
    jobs += [{"id": j, "tier": 2, "priority": p, "state": "pending", "gpus_per_node": 8,
              "nodes": 2, "same_block": True, "topology": "any"} for j, p in (("A", 20), ("B", 10))]
    snap = {"version": 1, "now": now, "storage": [{"id": "s", "write_gb_per_s": 1.0}],
            "nodes": nodes, "jobs": jobs,
            "policy": {"grace": {"min_s": 10, "max_s": 150, "safety": 1.0},
                       "thrash": {"max_gpu_fraction": None}}}  # (the storm limit's story)
    problem = build_problem(load_snapshot(snap))
    g = GreedyPlanner(problem)
    st = GreedyState(free={})
    a, b = job_order(problem)
    assert g.place(st, a) == [(0, 0xFF), (1, 0xFF)]
    assert st.victims == {"v1", "v2"} and st.loads == {"s": 120.0}
    key = (2, b.rights, 8, False, None)  # (None: no past-budget room, tier 2)
    assert g._grouped[key][2][1][5] == ["v3"]  # kept from A's turn, node unchanged
    for ni in (2, 3):
        assert g._grouped_option(st, b, ni) is None
        assert g.node_option(st, b, ni) is None
    assert g.place(st, b) is None
    # loads fall only in release (a finished plan's job taken out, as the polishing
    # and ejection passes do): A leaves and v1, v2 run again. n3 and n4 did not
    # change, but their kept "cannot host" entries must not outlive the fall
    g.release(st, 0, 0xFF, ["v1", "v2"])
    g.release(st, 1, 0xFF, [])
    assert st.loads == {"s": 0.0}
    for ni, v in ((2, "v3"), (3, "v4")):
        assert g._grouped_option(st, b, ni)[5] == [v]
    p = plan(snap, deterministic=True)
    assert p.objective.admitted_gpus == {"1": 0, "2": 16, "3": 0}
    assert [x.job for x in p.placements] == ["A"]
    assert [(x.job, x.reason) for x in p.deferred] == [("B", "STORM")]


def test_nodes_the_storm_limit_refused_come_back_when_the_load_falls() -> None:
    """Nodes n1-n3 (H100) and n4 (H200) on one storage target writing 1 GB/s, each
    held by a tier-3 job (v1-v4) with a 60 GB checkpoint; grace max_s 150 s with
    safety 1: two victims (120 GB) may flush this tick, not three (180 GB). Tier-2
    8-GPU jobs: D (H200) takes n4 and evicts v4, A (H100) takes n1 and evicts v1;
    C (H100, same shape as A, so the same heap of node options) is refused on n2
    and n3 by the storm limit. D is then taken out with v4, as ejection does: the
    load falls to 60 GB, and C fits on n2 (evict v2, 120 GB). Neither n2 nor n3
    changed, so the heap must bring back the nodes the limit refused when a load
    falls; it did not, and C stayed out."""
    from models import load_snapshot
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner, GreedyState

    nodes = [{"id": f"n{i}", "gpus": 8, "gpu_type": "H200" if i == 4 else "H100",
              "nvlink": "nvswitch", "storage": "s"} for i in range(1, 5)]
    jobs = _sixty_gb_holders(4)
    jobs += [{"id": j, "tier": 2, "priority": p, "state": "pending", "gpus_per_node": 8,
              "gpu_type": t, "topology": "any"}
             for j, p, t in (("D", 30, "H200"), ("A", 20, "H100"), ("C", 10, "H100"))]
    snap = {"version": 1, "now": "2026-11-30T08:00:00Z",
            "storage": [{"id": "s", "write_gb_per_s": 1.0}], "nodes": nodes, "jobs": jobs,
            "policy": {"grace": {"min_s": 10, "max_s": 150, "safety": 1.0}}}
    problem = build_problem(load_snapshot(snap))
    g = GreedyPlanner(problem)
    st = GreedyState(free={})
    a, c, d = (problem.pending[j] for j in "ACD")
    assert g.place(st, d) == [(3, 0xFF)] and g.place(st, a) == [(0, 0xFF)]
    assert st.victims == {"v4", "v1"} and st.loads == {"s": 120.0}
    assert g.place(st, c) is None
    g.release(st, 3, 0xFF, ["v4"])
    assert st.loads == {"s": 60.0}
    assert g.place(st, c) == [(1, 0xFF)] and st.victims == {"v1", "v2"}
    # a banned victim is no option (ejection's storm relief): C out again, with v2
    # and v3 banned it has no node; the ban lifted, n2 again
    g.release(st, 1, 0xFF, ["v2"])
    g.ban(st, {"v2", "v3"})
    assert g.place(st, c) is None
    g.ban(st, set())
    assert g.place(st, c) == [(1, 0xFF)]


def test_a_cluster_of_one_neighbourhood_gets_the_whole_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The whole model is skipped for LNS when its solve would be short next to its
    # size (portfolio.SOLVE_TIMES_EXACT). A cluster of one LNS neighbourhood has no
    # rounds to run (planner/solver/lns.py), so there the model gets any time worth a solve.
    # With the per-pair time set absurdly high, the 16-node bundled instance (one
    # storage target, one neighbourhood) is still solved and proven optimal, with
    # the objective it has without the change: 24 tier-2 and 2 tier-3 GPUs.
    import json
    from pathlib import Path

    from planner.solver import portfolio

    data = json.loads((Path(__file__).parent.parent / "instances" / "gen-small.json").read_text())
    monkeypatch.setattr(portfolio, "SOLVE_TIMES_EXACT", 1e5)
    p = plan(data, time_limit_s=1.0)
    assert p.status == "optimal"
    assert p.objective.admitted_gpus == {"1": 0, "2": 24, "3": 2}


def test_the_baselines_plans_are_candidates_without_an_eviction_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A 64-node snapshot from a session-8 soak (generated, then mutated; no eviction
    # budget). Every greedy variant admits 16/93 tier-1/tier-2 GPUs at best (the
    # greedy baseline 16/93/3); the Kubernetes- and Slurm-style baselines admit
    # 16/97/6. Their plans are candidates when the time allows, and always in
    # deterministic mode: with CP-SAT finding nothing, the fallback is the
    # baselines' plan (priority value 6,673), polished to a lower cost.
    import json
    from pathlib import Path

    from ortools.sat.python import cp_model

    data = json.loads((Path(__file__).parent / "data" / "soak-64-baselines.json").read_text())
    k8s = plan(data, planner="k8s")
    assert k8s.objective.admitted_gpus == {"1": 16, "2": 97, "3": 6}
    assert plan(data, planner="greedy").objective.admitted_gpus == {"1": 16, "2": 93, "3": 3}
    monkeypatch.setattr(cp_model.CpSolver, "solve",
                        lambda self, model, *a, **k: cp_model.UNKNOWN)
    p = plan(data, time_limit_s=1.0, deterministic=True)
    assert p.status == "fallback"
    assert p.objective.admitted_gpus == {"1": 16, "2": 97, "3": 6}
    assert p.objective.priority_value == k8s.objective.priority_value == 6673
    assert p.objective.eviction_cost_gpu_s <= k8s.objective.eviction_cost_gpu_s


def test_the_baselines_compete_in_the_time_the_neighbourhood_rounds_leave(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # LNS rounds stop after a pass without improvement, often long before their
    # deadline; the baselines that did not run before compete in the time left. The
    # 64-node soak snapshot of the previous test, with the optional candidates off
    # (EXTRA_SHARE = 0), the whole model unbuildable and LNS finding nothing: a
    # baseline's plan (16/97/6 GPUs per tier) beats the greedy plans' 16/93 and is
    # returned, polished, and the detail says so. (Ejection
    # moves and priority swaps, planner/heuristics/eject.py, are off: they would admit more
    # tier-3 jobs, and swap one for a priority value of 6,685.)
    import json
    from pathlib import Path

    from planner.solver import cpsat, lns, portfolio

    def no_model(*_a: Any, **_k: Any) -> Any:
        raise portfolio.BuildTimeout

    data = json.loads((Path(__file__).parent / "data" / "soak-64-baselines.json").read_text())
    data["policy"]["reserve"] = None  # (no node kept open: policy.reserve, tests/test_reserve.py)
    monkeypatch.setattr(cpsat, "EXTRA_SHARE", 0.0)
    monkeypatch.setattr(portfolio, "CpsatModel", no_model)
    monkeypatch.setattr(portfolio, "improve",
                        lambda problem, d, deadline, **k: lns.LnsResult(d, 0, 0))
    monkeypatch.setattr(portfolio, "eject", lambda problem, d, *a, **k: (d, 0))
    monkeypatch.setattr(portfolio, "upgrade", lambda problem, d, *a, **k: (d, 0))
    # (and no bound proved meanwhile in another lane: the status stays SKIPPED)
    monkeypatch.setattr(portfolio.BoundLane, "start", lambda *_a: False)
    p = plan(data, time_limit_s=1.0)
    assert p.status == "fallback" and p.solver.status == "SKIPPED"
    # both baselines admit 16/97/6; the Slurm-style plan costs less (32,090 GPU-s
    # against the Kubernetes-style 40,755, whose node choice follows kube-scheduler:
    # the least important victims first, then their sum, then their number)
    assert "the Slurm-style baseline's plan, better, returned" in p.solver.detail
    assert p.objective.admitted_gpus == {"1": 16, "2": 97, "3": 6}
    assert p.objective.priority_value == 6673


def test_the_baselines_are_candidates_when_the_whole_model_fits_in_a_short_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Optional candidates (the baselines, the priority-first variant) used to need an
    # LNS round's time (Rates.round_s) left after them wherever LNS had rounds to run, even
    # when the whole model fitted and LNS would not run: a 50-node soak cluster at
    # 0.2 s skipped the baselines and returned a plan behind the Slurm-style one's.
    # They now need the whole model to fit after them. The 64-node soak snapshot of
    # the tests above, as a cluster of four neighbourhoods (NEIGHBOURHOOD_NODES 16;
    # squeaky-wheel passes and second lanes start above 4 x 16 nodes), an LNS round
    # longer than any budget, and CP-SAT finding nothing: the fallback is the
    # baselines' plan, 16/97/6 GPUs per tier (the greedy plans' best is 16/93). One
    # pending job can start on no node (planner/core/reduce.py): the detail says so.
    import json
    from pathlib import Path

    from ortools.sat.python import cp_model

    from planner.solver import cpsat, portfolio

    data = json.loads((Path(__file__).parent / "data" / "soak-64-baselines.json").read_text())
    monkeypatch.setattr(cpsat, "NEIGHBOURHOOD_NODES", 16)
    monkeypatch.setattr(portfolio.RATES, "lns_round_s", 1e3)
    monkeypatch.setattr(cp_model.CpSolver, "solve",
                        lambda self, model, *a, **k: cp_model.UNKNOWN)
    p = plan(data, time_limit_s=2.0)
    assert p.status == "fallback"
    assert p.solver.detail == (
        "1 pending job(s) could start on no node (free GPUs only, by R13 or R15, and too "
        "few nodes with room): deferred without a search; "
        "solver gave no solution in time; greedy plan returned")
    assert p.objective.admitted_gpus == {"1": 16, "2": 97, "3": 6}
    assert p.objective.priority_value == 6673


@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_a_phase_takes_the_time_a_skipped_later_phase_would_leave(
        monkeypatch: pytest.MonkeyPatch, factor: float) -> None:
    # run_phases gives the admission phase 60% of the budget (FIRST_PHASE_SHARE) and
    # skips the cost phase when less than its overhead plus MIN_SOLVE_S / 2 is left.
    # With 0.1 s in all, 60% would leave 0.04 s minus the overhead (SOLVE_OVERHEAD_S,
    # 20 ms, + 4 us per variable): too little, so the admission phase gets all 0.1 s
    # less its overhead, and the cost phase is skipped. With 10 s, the admission phase
    # gets 6 s less it; with nothing, the least limit (LEAST_PHASE_S, 10 ms). At speed
    # factor 2 (planner/solver/speed.py) the fixed overhead is 40 ms (so 0.1 s still
    # leaves too little for the cost phase) and the least limit 20 ms.
    from models import load_snapshot
    from planner.core.budget import Budget
    from planner.core.decision import clean
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner
    from planner.solver import model as cpsat_model
    from planner.solver.speed import ENV

    monkeypatch.setenv(ENV, str(factor))
    problem = build_problem(load_snapshot(generate(nodes=32, pending=12, seed=3)))
    hint = clean(problem, GreedyPlanner(problem, spare_lower=True).solve())
    limits: list[float] = []
    real = cpsat_model.make_solver

    def spy(time_limit_s: float, *a: Any, **k: Any) -> Any:
        limits.append(time_limit_s)
        return real(time_limit_s, *a, **k)

    monkeypatch.setattr(cpsat_model, "make_solver", spy)
    for remaining, first in ((0.1, 0.1), (10.0, 6.0), (0.0, None)):
        model = cpsat_model.CpsatModel(problem)
        assert len(model.phases()) == 2
        overhead = 0.02 * factor + 4e-6 * len(model.m.proto.variables)
        limits.clear()
        # (a budget without a clock: its whole length is left, exactly)
        cpsat_model.run_phases(model, hint, Budget(remaining, wall=False), deterministic=False,
                               workers=1, seed=0)
        if first is None:
            assert limits == [pytest.approx(0.01 * factor)]
        else:
            assert limits[0] == pytest.approx(first - overhead)


def test_the_storm_variant_without_free_sparing_keeps_the_budget_for_its_tier(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Storage fs writes 10 GB/s; grace max 60 s, safety 1. Two tier-2 jobs with a
    # signal, 300 GB checkpoints, barrier 10 s, cleanup 5 s, restore 100 s: w on
    # H100 node b, w2 on H200 node c (cost 8 x (100 + 300 / 10) = 1,040 GPU-s each).
    # fs may take (60 - 10 - 5) x 10 = 450 GB while they flush: one (300 GB), not
    # both (600). H100 node a is free. Pending: tier-1 J1 (8 GPUs, H100, priority
    # 20), tier-1 J2 (8, H200, priority 10: only node c), tier-2 L (8 GPUs; tier 2
    # may evict only tier 3, so only the free node a).
    # Sparing free GPUs for L, J1 evicts w rather than take a (with or without the
    # storm price: a free GPU weighs more than any eviction); J2 then needs w2 too,
    # and fs refuses 600 GB: 8 tier-1 and 8 tier-2 GPUs. Without free sparing J1
    # takes a and J2 evicts w2: 16 tier-1 GPUs, the optimum (L waits; w2 alone,
    # 1,040 GPU-s, the only eviction; fs flushes 300 GB in 30 s).
    from models import load_snapshot
    from planner.core.decision import clean, objective_of
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner
    from planner.solver.cpsat import STORM_PRICE

    def holder(jid: str, node: str) -> dict:
        return {"id": jid, "tier": 2, "state": "running", "gpus_per_node": 8,
                "started_at": "2026-11-29T00:00:00Z",
                "checkpoint": {"size_gb": 300, "signal": "SIGTERM", "barrier_s": 10,
                               "cleanup_s": 5, "restore_s": 100},
                "placement": [{"node": node, "gpus": list(range(8))}]}

    def node(nid: str, kind: str) -> dict:
        return {"id": nid, "gpus": 8, "gpu_type": kind, "storage": "fs"}

    data = {"version": 1, "now": "2026-11-29T08:00:00Z",
            "storage": [{"id": "fs", "write_gb_per_s": 10.0}],
            "nodes": [node("a", "H100"), node("b", "H100"), node("c", "H200")],
            "jobs": [holder("w", "b"), holder("w2", "c"),
                     {"id": "J1", "tier": 1, "state": "pending", "gpus_per_node": 8,
                      "gpu_type": "H100", "priority": 20},
                     {"id": "J2", "tier": 1, "state": "pending", "gpus_per_node": 8,
                      "gpu_type": "H200", "priority": 10},
                     {"id": "L", "tier": 2, "state": "pending", "gpus_per_node": 8,
                      "priority": 5}],
            "policy": {"grace": {"min_s": 0, "max_s": 60, "safety": 1}}}
    pr = build_problem(load_snapshot(data))

    def admitted(**settings: Any) -> dict[str, int]:
        return objective_of(pr, clean(pr, GreedyPlanner(pr, **settings).solve())).admitted_gpus

    storm = {"storm_price": STORM_PRICE, "priced": frozenset({"fs"})}
    assert admitted(spare_lower=True) == {"1": 8, "2": 8, "3": 0}
    assert admitted(spare_lower=True, **storm) == {"1": 8, "2": 8, "3": 0}
    assert admitted(spare_lower=True, spare_free=False, **storm) == {"1": 16, "2": 0, "3": 0}
    # the planner runs that variant when the storm limit refused a victim and time allows
    from planner.solver import portfolio

    seen: list[dict] = []

    class Recording(GreedyPlanner):
        def __init__(self, problem: Any, **settings: Any) -> None:
            seen.append(settings)
            super().__init__(problem, **settings)

    monkeypatch.setattr(portfolio, "GreedyPlanner", Recording)
    p = plan(data, time_limit_s=2.0)
    assert {"spare_lower": True, "spare_free": False, **storm} in seen
    assert p.objective.admitted_gpus == {"1": 16, "2": 0, "3": 0}
    assert p.objective.eviction_cost_gpu_s == 1040.0
    assert [e.job for e in p.evictions] == ["w2"]
    assert {pl.job: pl.placement[0].node for pl in p.placements} == {"J1": "a", "J2": "c"}
    assert [(s.storage, s.flush_gb, s.flush_s) for s in p.storm] == [("fs", 300.0, 30.0)]


def test_ejection_gets_at_least_most_of_the_time_left_before_the_last_pass() -> None:
    # The last polishing pass (moves to cheaper victims) must end at `late`; ejection
    # stops at `end`, which keeps CHEAPER_TIMES x the first passes' time for that
    # pass. When those passes were slow, `end` comes before ejection starts, or soon
    # after (at 4,096 nodes and 1 s, 0.10 s of ejection where 0.14 s admits one more
    # job): it then gets seven tenths of the time left.
    from planner.solver.portfolio import EJECT_LEAST_SHARE, eject_deadline

    assert EJECT_LEAST_SHARE == 0.7
    assert eject_deadline(10.0, 9.5, 11.0) == pytest.approx(10.7)  # end past: 0.7 of 1 s
    assert eject_deadline(10.0, 10.5, 11.0) == pytest.approx(10.7)  # end leaves 0.5 s
    assert eject_deadline(10.0, 10.8, 11.0) == 10.8  # end leaves less: end


def test_after_exempt_jobs_take_free_gpus_first_cpsat_is_never_worse_than_a_baseline(
        ) -> None:
    # A generated 256-node cluster (seed 0). CP-SAT's best plan admits more, but its
    # exempt tier-1 jobs' victims take it past R15's window, so thrash.exempt_free_first
    # moves 7 exempt jobs to free GPUs that tier-2 jobs held: 56/76/39 GPUs per tier.
    # The baselines need no trade: 56/104/39 each, priority value 12,110 for the plain
    # greedy plan (7 evictions), 12,146 for the Kubernetes-style one (6 evictions)
    # and the Slurm-style one (7, costlier). Every plan is kept after its trade, so the
    # passes after a candidate start from the plan that ranks highest once traded:
    # the Kubernetes-style plan, whose moves to cheaper victims then bring its
    # eviction cost from 23,152 to 19,009 GPU-s (7 victims where it had 6: the
    # objective ranks the cost before the count).
    from planner.checks.verify import objective_of

    data = generate(nodes=256, pending=100, seed=0, gpus_per_node=8, occupancy=0.9,
                    immune_share=0.25, multinode_share=0.1)
    data["policy"]["reserve"] = None  # (no node kept open: policy.reserve, tests/test_reserve.py)
    snap = load_snapshot(data)
    p = plan(snap, time_limit_s=0.5, deterministic=True)
    keys = {b: objective_of(snap, plan(snap, planner=b)).key() for b in ("greedy", "k8s", "slurm")}
    assert [k[:4] for k in keys.values()] == [(56, 104, 39, 12110), (56, 104, 39, 12146),
                                              (56, 104, 39, 12146)]
    assert all(objective_of(snap, p).key() >= k for k in keys.values())
    assert (p.objective.admitted_gpus, p.objective.priority_value) == (
        {"1": 56, "2": 104, "3": 39}, 12146)
    assert (p.objective.evictions, p.objective.evictions_past_budget) == (7, 0)
    assert round(p.objective.eviction_cost_gpu_s) == 19009
    assert "the Kubernetes-style baseline's plan is better once exempt jobs take free GPUs " \
        "first (thrash.exempt_free_first): returned" in (p.solver.detail or "")
    # (the whole model, hinted with that plan, finds none in its 0.5 s of deterministic
    # time, 1 s finds one: the plan is the passes', as the status says)
    assert p.status == "fallback" and p.solver.gap is None
    assert verify(snap, p) == []


def test_each_candidate_is_kept_after_exempt_jobs_take_free_gpus_first() -> None:
    # The generated 256-node tick of the test above. The sparing greedy plan admits
    # 56/112/39 GPUs per tier (priority value 12,458, 17 victims), but its exempt
    # tier-1 jobs' victims take it past R15's window: thrash.exempt_free_first moves
    # 13 exempt jobs to the free GPUs tier-2 and tier-3 jobs held, which then wait:
    # 56/68/27 and no victim. The plain greedy plan admits 56/104/39 (12,110, 7
    # victims) and needs no trade. Each plan is kept after its trade, so the plain
    # plan ranks first; a pass that starts from it and returns the sparing plan (which
    # ranks above it by the contract's objective alone) is not kept, and the plan
    # says which plan won once traded.
    from planner.core.budget import Budget
    from planner.core.decision import clean, objective_of
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner
    from planner.solver.cpsat import _Run
    from planner.solver.portfolio import Greedy, Polish

    data = generate(nodes=256, pending=100, seed=0, gpus_per_node=8, occupancy=0.9,
                    immune_share=0.25, multinode_share=0.1)
    data["policy"]["reserve"] = None
    problem = build_problem(load_snapshot(data))
    sparing = clean(problem, GreedyPlanner(problem, spare_lower=True).solve())
    plain = clean(problem, GreedyPlanner(problem).solve())
    assert objective_of(problem, sparing).key()[:4] == (56, 112, 39, 12458)
    run = _Run(problem, Budget(1.0, wall=False), workers=1, seed=0, log=False, prune=True)
    assert run.swapping
    first = Greedy({"spare_lower": True})
    run.keep(first, sparing)
    assert run.best is run.plan_of[id(first)] and run.best is not sparing
    assert run.key(run.best)[:6] == (56, 68, 27, 9243, 0.0, 0)
    assert run.moved[id(run.best)] == (run.best, 13)
    second = Greedy({})
    run.keep(second, plain)
    assert run.best is plain and run.by is second  # (no exempt job moves in it)
    back = Polish(plain)
    run.keep(back, sparing)  # traded, it ranks below the plain plan: not kept
    assert run.best is plain
    best, moved, note = run._exempt_free_first(run.best)
    assert (best, moved) == (plain, 0)
    assert note == ("the plain greedy plan (the greedy baseline's) is better once exempt "
                    "jobs take free GPUs first (thrash.exempt_free_first): returned")


def _exempt_victim_tick() -> dict[str, Any]:
    """One 8-GPU node: tier-3 ``hpo`` on GPUs 0-1 and tier-2 ``ft`` on 6-7, evictable
    (4 h old); GPUs 2-5 held by two jobs 10 minutes old (R6). Pending: tier-1
    ``serve`` and tier-2 ``train``, 2 GPUs each."""
    old, young = "2026-11-29T04:00:00Z", "2026-11-29T07:50:00Z"

    def running(jid: str, tier: int, gpus: list[int], start: str) -> dict[str, Any]:
        return {"id": jid, "tier": tier, "state": "running", "gpus_per_node": len(gpus),
                "started_at": start, "checkpoint": {"size_gb": 1, "signal": "SIGTERM"},
                "placement": [{"node": "n1", "gpus": gpus}]}

    return {"version": 1, "now": "2026-11-29T08:00:00Z",
            "storage": [{"id": "fs", "write_gb_per_s": 10}],
            "nodes": [{"id": "n1", "gpus": 8, "nvlink": "nvswitch", "storage": "fs"}],
            "jobs": [running("hpo", 3, [0, 1], old), running("ft", 2, [6, 7], old),
                     running("y3", 3, [2, 3], young), running("y2", 2, [4, 5], young),
                     {"id": "serve", "tier": 1, "state": "pending", "gpus_per_node": 2},
                     {"id": "train", "tier": 2, "state": "pending", "gpus_per_node": 2}],
            "policy": {"thrash": {"exempt_if": "any", "exempt_free_first": False}}}


def test_a_victim_counted_exempt_does_not_leave_a_shard_without_gpus() -> None:
    # Both jobs fit only one way: serve (tier 1, may evict tiers 2 and 3) on ft's GPUs
    # 6-7 and train (tier 2, may evict only tier 3) on hpo's 0-1. A solution may count
    # hpo as exempt (R15, exempt_if: any: a tier-1 preemptor uses one of its GPUs);
    # dealing serve hpo's GPUs first then leaves train none, and the solution was
    # refused (EXTRACT_FAILED: the greedy plan returned as a fallback). The GPUs are
    # now dealt once more with no victim preferred. Whether the solver counts hpo so
    # here is its choice; the generated tick below is one where it did.
    data = _exempt_victim_tick()
    p = plan(data, deterministic=True, time_limit_s=1.0)
    assert p.solver.engine == "cp-sat" and p.status == "optimal", p.solver
    assert {pl.job: pl.placement[0].gpus for pl in p.placements} == {"serve": [6, 7],
                                                                     "train": [0, 1]}
    assert sorted(e.job for e in p.evictions) == ["ft", "hpo"]
    assert verify(load_snapshot(data), p) == []


def test_the_generated_tick_whose_solution_could_not_be_dealt_plans_optimally() -> None:
    # the tick the sweep found (random_tick and random_policy of case 107116: 6 nodes,
    # 26 running jobs, 5 pending): the solver's solution counted a tier-3 victim
    # exempt whose GPUs a tier-2 shard needed; the greedy plan returned evicted for
    # 1,066 GPU-s what the model's plan admits for 433
    import random

    from snapshot_parts import random_policy, random_tick

    r = random.Random(107116)
    data = random_tick(r, 107116, pending=(5, 10, 16))
    data["policy"] = random_policy(r)
    p = plan(data, deterministic=True, time_limit_s=0.5)
    assert p.status == "optimal" and p.solver.status == "OPTIMAL", p.solver
    assert p.objective.admitted_gpus == {"1": 2, "2": 4, "3": 0}
    assert round(p.objective.eviction_cost_gpu_s) == 433
    assert verify(load_snapshot(data), p) == []
