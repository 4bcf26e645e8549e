"""The part of a tick that needs no search (planner/core/reduce.py): pending jobs no
plan can start are deferred without one, jobs that may only take free GPUs keep only
the nodes with room. Hand-worked, then over random ticks: nothing the reduction
drops is placed by any planner on the whole tick, and CP-SAT reaches the same
optimum with and without it."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from snapshot_parts import random_policy, random_tick

from models import load_snapshot
from planner import plan
from planner.core.problem import build_problem
from planner.core.reduce import reduce_problem
from planner.solver import cpsat
from planner.solver.cpsat import solve_cpsat

NOW = "2026-11-29T08:00:00Z"


def _snap() -> dict[str, Any]:
    """Two 8-GPU nodes. On a, tier-3 job small3 holds GPUs 0-3 (4 free); on b,
    tier-3 job old3 holds all 8. Both started two hours ago: evictable. Four
    evictions of 8 GPUs at 07:50 spend the window: B = max(4, floor(0.03 x 2)) = 4
    evictions and max(32, 3% of 16) = 32 GPUs, so no victim that is not exempt is
    left. Pending, queued an hour (past tier 2's patience): big2 (tier 2, 8 GPUs),
    half2 (tier 2, 4 GPUs), urgent1 (tier 1, 8 GPUs)."""
    def running(jid: str, node: str, gpus: list[int]) -> dict[str, Any]:
        return {"id": jid, "tier": 3, "state": "running", "gpus_per_node": len(gpus),
                "started_at": "2026-11-29T06:00:00Z",
                "placement": [{"node": node, "gpus": gpus}]}

    def pending(jid: str, tier: int, gpus: int) -> dict[str, Any]:
        return {"id": jid, "tier": tier, "state": "pending", "gpus_per_node": gpus,
                "submitted_at": "2026-11-29T07:00:00Z"}

    return {"version": 1, "now": NOW,
            "nodes": [{"id": "a", "gpus": 8}, {"id": "b", "gpus": 8}],
            "jobs": [running("small3", "a", [0, 1, 2, 3]), running("old3", "b", list(range(8))),
                     pending("big2", 2, 8), pending("half2", 2, 4), pending("urgent1", 1, 8)],
            "recent_evictions": [{"job": f"x{k}", "at": "2026-11-29T07:50:00Z", "gpus": 8}
                                 for k in range(4)]}


def test_a_job_no_plan_can_start_is_deferred_without_a_search() -> None:
    problem = build_problem(load_snapshot(_snap()))
    assert problem.thrash is not None
    assert (problem.thrash.left, problem.thrash.gpus_left) == (0, -16)
    work, red = reduce_problem(problem)
    # big2 may use no victim (tier 2 is not exempt; under exempt_if "all" a victim it
    # used would not be exempt either) and no node has 8 free GPUs: dropped. half2 fits
    # a's 4 free GPUs only: node a (index 0) is its one candidate, without rights.
    # urgent1 (tier 1, exempt) keeps its rights and both nodes.
    assert red.dropped == {"big2"} and red.free_only == {"half2"}
    assert set(work.pending) == {"half2", "urgent1"}
    assert work.pending["half2"].candidates == [0] and not work.pending["half2"].rights
    assert work.pending["urgent1"] is problem.pending["urgent1"]
    p = plan(_snap(), deterministic=True)
    # urgent1 evicts old3 (exempt: R15 lets it through), half2 takes a's free GPUs;
    # big2 is explained as the search would explain it: the window is spent until
    # the oldest eviction leaves it at 08:50
    assert [(e.job, e.preemptors) for e in p.evictions] == [("old3", ["urgent1"])]
    assert {pl.job: pl.placement[0].node for pl in p.placements} == {"urgent1": "b",
                                                                     "half2": "a"}
    assert [(d.job, d.reason, d.until and d.until.isoformat()) for d in p.deferred] == [
        ("big2", "THRASH_BUDGET", "2026-11-29T08:50:00+00:00")]
    assert p.status == "optimal"
    assert "1 pending job(s) could start on no node" in (p.solver.detail or "")


def test_only_flooded_kinds_are_cut_where_the_time_left_holds_only_the_first_runs_least(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The tick above with the first greedy run's least at 10 s: the time left (1 s)
    # holds less than the reserve and that least, so the reduction cuts flooded kinds
    # alone (none here) and big2 is searched; the plan is the same (big2 still
    # deferred, explained as the search explains it), without the reduction's note.
    # With the least at its value the reduction drops big2 again; in deterministic
    # mode whatever the least
    calls: list[bool] = []
    real = cpsat.reduce_problem

    def counted(problem: Any, *, narrow: bool = True) -> Any:
        calls.append(narrow)
        return real(problem, narrow=narrow)

    monkeypatch.setattr(cpsat, "reduce_problem", counted)
    monkeypatch.setattr(cpsat, "FIRST_LEAST_S", 10.0)
    p = plan(_snap(), time_limit_s=1.0)
    assert calls == [False]
    assert {pl.job for pl in p.placements} == {"urgent1", "half2"}
    assert [(d.job, d.reason) for d in p.deferred] == [("big2", "THRASH_BUDGET")]
    assert "could start on no node" not in (p.solver.detail or "")
    assert "1 pending job(s) could start on no node" in (
        plan(_snap(), deterministic=True).solver.detail or "")
    monkeypatch.undo()
    monkeypatch.setattr(cpsat, "reduce_problem", counted)
    p = plan(_snap(), time_limit_s=1.0)
    assert calls == [False, True, True]
    assert "1 pending job(s) could start on no node" in (p.solver.detail or "")
    problem = build_problem(load_snapshot(_snap()))
    assert real(problem, narrow=False) == (problem, cpsat.Reduction())


def test_the_bound_of_a_reduced_tick_shows_what_the_greedy_plan_misses() -> None:
    # The greedy planner places urgent1 first, on its cheapest victims: small3 (4
    # GPUs) and a's 4 free GPUs rather than old3 (8 GPUs); half2 then finds no free
    # GPU and may not evict: 8/0/0. The relaxation (of the reduced tick, planner/
    # __init__._bound) proves tier 1's 8 GPUs the most and tier 2's 4 reachable:
    # gap (4 - 0) / 4 = 1 at tier 2, where CP-SAT's plan (above) admits them.
    p = plan(_snap(), planner="greedy", deterministic=True, bound_s=2.0)
    assert [e.job for e in p.evictions] == ["small3"]
    assert p.objective.admitted_gpus == {"1": 8, "2": 0, "3": 0}
    assert p.status == "feasible" and p.solver.gap == 1.0
    assert (p.solver.detail or "").endswith(
        "the plan reaches the bound on tier-1 GPUs; tier-2 GPUs 0 against at most 4")


def test_without_victims_for_anyone_every_job_is_free_only() -> None:
    # R13's max_evictions_per_tick 0: no plan has a victim, urgent1 included, and no
    # node has 8 free GPUs: only half2 is left to place
    snap = _snap()
    snap["recent_evictions"] = []
    snap["policy"] = {"max_evictions_per_tick": 0}
    work, red = reduce_problem(build_problem(load_snapshot(snap)))
    assert red.dropped == {"big2", "urgent1"} and set(work.pending) == {"half2"}
    p = plan(snap, deterministic=True)
    assert p.evictions == [] and [pl.job for pl in p.placements] == ["half2"]
    assert p.status == "optimal"


def test_a_tick_with_nothing_to_drop_is_searched_as_it_is() -> None:
    snap = _snap()
    snap["recent_evictions"] = []  # the window has room: every job may evict
    problem = build_problem(load_snapshot(snap))
    work, red = reduce_problem(problem)
    assert work is problem and not red.dropped and not red.free_only


# cases 300-339: 4-12 nodes of 4 or 8 GPUs, 5-16 pending jobs, 70-95% occupied,
# gangs, pools, the random policies of test_bound.py; the window spent in about half
# of them (recent evictions). The reduction drops jobs in 32 of them and keeps jobs to
# free GPUs in 36; in 38 both plans are proven optimal and their objectives compared.
@pytest.mark.parametrize("case", range(300, 340))
def test_what_the_reduction_drops_no_planner_places_and_the_optimum_is_the_same(
        case: int) -> None:
    r = random.Random(case)
    snap = random_tick(r, case, pending=(5, 10, 16))
    snap["policy"] = random_policy(r)
    if r.random() < 0.5:
        snap["recent_evictions"] = [{"job": f"gone{k}", "at": snap["now"], "gpus": 8}
                                    for k in range(r.choice([4, 40]))]
        # (an eviction counts while now - window_s <= at < now: now half a second later)
        snap["now"] = snap["now"].replace("Z", ".5Z")
    snap = json.loads(json.dumps(snap))
    problem = build_problem(load_snapshot(snap))
    work, red = reduce_problem(problem)
    for name in ("greedy", "k8s", "slurm"):
        p = plan(snap, planner=name, deterministic=True)
        assert not red.dropped & {pl.job for pl in p.placements}, name
        for pl in p.placements:  # free-only jobs: on their nodes with room, no victim's GPU
            if pl.job in red.free_only:
                nodes = {problem.nodes[ni].node.id for ni in work.pending[pl.job].candidates}
                assert {part.node for part in pl.placement} <= nodes, (name, pl.job)
    whole = solve_cpsat(problem, time_limit_s=4.0, deterministic=True, workers=1, reduce=False)
    reduced = solve_cpsat(problem, time_limit_s=4.0, deterministic=True, workers=1)
    assert not red.dropped & {pl.job for pl in whole.placements}
    if whole.status == "optimal" and reduced.status == "optimal":
        key = ("admitted_gpus", "priority_value", "eviction_cost_gpu_s", "evictions")
        assert [getattr(whole.objective, k) for k in key] == \
            [getattr(reduced.objective, k) for k in key]


def _flood(copies: int) -> dict[str, Any]:
    """_snap's nodes and running jobs without the spent window, and ``copies`` jobs of
    each of two kinds: tier-3 jobs of 2 GPUs (t3-*, no rights: a's 4 free GPUs hold 2
    of them) and tier-2 jobs of 4 GPUs (t2-*, may evict tier 3: a's 4 free GPUs and
    small3's 4, b's 8 held by old3: 4 shards). Priorities 0-4 by id, every third job
    submitted an hour before the others."""
    snap = _snap()
    snap["recent_evictions"] = []
    running = [j for j in snap["jobs"] if j["state"] == "running"]
    jobs = []
    for kind, tier, gpus in (("t3", 3, 2), ("t2", 2, 4)):
        for k in range(copies):
            jobs.append({"id": f"{kind}-{k:02d}", "tier": tier, "state": "pending",
                         "gpus_per_node": gpus, "priority": k % 5,
                         "submitted_at": ("2026-11-29T06:00:00Z" if k % 3 == 0
                                          else "2026-11-29T07:00:00Z")})
    snap["jobs"] = running + jobs
    return snap


def test_a_flooded_kind_is_cut_to_the_most_it_could_ever_place(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # With CUT_LEAST 3 and 12 jobs of each kind: t3 could place 2 (a's free GPUs), t2
    # 4 (its shards on a and b counting tier-3 victims' GPUs): kept max(3, 2) = 3 and
    # max(3, 4) = 4, the most important first: priority 4 (ids 04 and 09), then 3
    # (03, 08), ..., and within a priority the job submitted an hour earlier first
    # (every third: 00, 03, 06, 09): t3 keeps 04, 09 and 03 (submitted earlier than
    # 08); t2 keeps 04, 09, 03 and 08. Twelve jobs or fewer per kind: no cut.
    from planner.core import reduce as red_mod

    monkeypatch.setattr(red_mod, "CUT_LEAST", 3)
    problem = build_problem(load_snapshot(_flood(12)))
    work, red = reduce_problem(problem)
    kept = {j for j in work.pending}
    assert kept == {"t3-04", "t3-09", "t3-03", "t2-04", "t2-09", "t2-03", "t2-08"}
    assert red.beyond == {j for j in problem.pending} - kept and len(red.beyond) == 17
    # (the tier-3 jobs kept may only take free GPUs: a is their one node)
    assert not red.dropped and red.free_only == {"t3-04", "t3-09", "t3-03"}
    assert "17 pending job(s) came after the most jobs of their kind" in red.note()
    # cutting the flooded kinds alone (narrow=False): the same cut, nothing narrowed
    quick = reduce_problem(problem, narrow=False)[1]
    assert quick.beyond == red.beyond and not quick.free_only and not quick.dropped
    monkeypatch.setattr(red_mod, "CUT_LEAST", 12)
    assert reduce_problem(problem)[1].beyond == frozenset()
    # the plan: the search places t3-04 and t3-09 on a's free GPUs... and every job cut
    # is explained as the search explains the jobs of its kind it did not place
    monkeypatch.setattr(red_mod, "CUT_LEAST", 3)
    p = plan(_flood(12), deterministic=True)
    reasons = {d.job: d.reason for d in p.deferred}
    placed = {pl.job for pl in p.placements}
    assert placed <= kept
    for kind in ("t3", "t2"):
        searched = {reasons[j] for j in kept - placed if j.startswith(kind)}
        cut = {reasons[j] for j in red.beyond if j.startswith(kind)}
        assert cut <= searched | {"OUTRANKED"}, (kind, cut, searched)
    assert "17 pending job(s) came after the most jobs of their kind" in (p.solver.detail or "")


# cases 400-419: random_tick's clusters with each pending job copied 3 more times
# (other priorities): with CUT_LEAST 2, kinds are cut in 18 of them (2-8 jobs); CP-SAT
# proves both plans optimal in 15 of those, with the same objective, and the plan of
# the reduced tick is valid in all.
@pytest.mark.parametrize("case", range(400, 420))
def test_cutting_flooded_kinds_keeps_the_optimum(case: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.core import reduce as red_mod

    r = random.Random(case)
    snap = random_tick(r, case, pending=(4, 6, 8))
    pending = [j for j in snap["jobs"] if j["state"] == "pending"]
    for j in pending:
        for c in range(3):
            snap["jobs"].append({**j, "id": f"{j['id']}-c{c}",
                                 "priority": r.choice([0, 1, 5, j.get("priority", 0)])})
    snap = json.loads(json.dumps(snap))
    monkeypatch.setattr(red_mod, "CUT_LEAST", 2)
    problem = build_problem(load_snapshot(snap))
    work, red = reduce_problem(problem)
    assert set(work.pending) | red.beyond | red.dropped == set(problem.pending)
    whole = solve_cpsat(problem, time_limit_s=4.0, deterministic=True, workers=1, reduce=False)
    reduced = solve_cpsat(problem, time_limit_s=4.0, deterministic=True, workers=1)
    if whole.status == "optimal" and reduced.status == "optimal":
        key = ("admitted_gpus", "priority_value", "eviction_cost_gpu_s", "evictions")
        assert [getattr(whole.objective, k) for k in key] == \
            [getattr(reduced.objective, k) for k in key]
    from planner.checks.verify import verify
    assert verify(load_snapshot(snap), reduced) == []


def test_the_greedy_planner_searches_the_reduced_tick_as_cpsats_floor_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The greedy planner (planner="greedy") plans the tick without what needs no
    # search, as CP-SAT's plain greedy floor does: on _flood(12) with CUT_LEAST 3 it
    # places only jobs the cut keeps, its plan is the plain greedy plan of the reduced
    # tick after the same passes, and its detail counts the jobs left out.
    from planner.core import reduce as red_mod
    from planner.core.decision import best_fit, exempt_free_first, first_come
    from planner.heuristics.greedy import GreedyPlanner

    monkeypatch.setattr(red_mod, "CUT_LEAST", 3)
    snap = _flood(12)
    problem = build_problem(load_snapshot(snap))
    work, red = reduce_problem(problem)
    assert len(red.beyond) == 17
    p = plan(snap, planner="greedy")
    placed = {pl.job: [(part.node, part.gpus) for part in pl.placement] for pl in p.placements}
    assert set(placed) <= set(work.pending) and placed
    d = GreedyPlanner(work).solve()
    d, _ = exempt_free_first(problem, d)
    d, _ = first_come(problem, d)
    d, _ = best_fit(problem, d)
    assert placed == {j: [(problem.nodes[ni].node.id, [g for g in range(8) if m >> g & 1])
                          for ni, m in parts] for j, parts in d.placements.items()}
    assert sorted(e.job for e in p.evictions) == sorted(d.victims)
    assert "17 pending job(s) came after the most jobs of their kind" in (p.solver.detail or "")


@pytest.mark.parametrize("case", range(20))
def test_the_jobs_past_the_first_of_a_kind_are_those_sorting_them_gives(case: int) -> None:
    # reduce.after_first puts in order only the jobs of the priority where the first
    # ``keep`` end: the same ids as sorting every job by _rank (priority, then the
    # queue's order: submitted_at, none first, then id), over random kinds with ties
    from datetime import datetime, timedelta
    from types import SimpleNamespace

    from planner.core.reduce import _rank, after_first

    r = random.Random(case)
    t0 = datetime(2026, 12, 1)
    jobs = []
    for k in range(r.randint(1, 60)):
        job = SimpleNamespace(
            id=f"j{r.randint(0, 10**6):07d}-{k}", priority=r.choice([1, 2, 2.5, 3, 7]),
            submitted_at=None if r.random() < 0.2 else t0 + timedelta(seconds=r.randint(0, 5)))
        jobs.append((job.id, SimpleNamespace(job=job)))
    keep = r.randint(0, 70)
    reference = [jid for jid, _info in sorted(jobs, key=lambda pair: _rank(pair[1]))[keep:]]
    assert sorted(after_first(jobs, keep)) == sorted(reference)
