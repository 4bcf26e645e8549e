"""The time limit as a promise: a greedy run stops at the end of its budget with the
jobs it reached placed (GreedyPlanner.solve), and solve_cpsat returns that plan,
saying which jobs were not considered, when preprocessing and the checks leave no
time for a whole greedy run (planner/solver/cpsat.py, FIRST_LEAST_S).

Conventions as in test_squeaky.py: two empty 8-GPU NVSwitch nodes, Monday
2026-11-30 08:00Z, default policy.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from snapshot_parts import gang_tick

import planner
from models import SolverInfo, load_snapshot
from planner.checks.assemble import assemble
from planner.checks.verify import verify
from planner.core.budget import Budget
from planner.core.decision import objective_of
from planner.core.problem import build_problem
from planner.heuristics.greedy import CutKeep, GreedyPlanner
from planner.solver import cpsat

NOW = "2026-11-30T08:00:00Z"


def _snap() -> dict[str, Any]:
    nodes = [{"id": f"n{i}", "gpus": 8, "gpu_type": "H100", "nvlink": "nvswitch"}
             for i in range(2)]

    def job(jid: str, gpus: int, tier: int, **extra: Any) -> dict:
        return {"id": jid, "tier": tier, "state": "pending", "gpus_per_node": gpus,
                "priority": 10, "topology": "any", **extra}

    # the greedy order: tier, then larger first: a (tier 1, 8), b (6), c (2), d (tier 3,
    # 2); e was preempted 10 s ago and is in its cooldown (R9): never in the order.
    # r, tier 3, has run for 8 hours on all of n1 (a tier-2 job may evict it).
    jobs = [job("a", 8, 1), job("b", 6, 2), job("c", 2, 2), job("d", 2, 3),
            job("e", 1, 2, preemptions=1, last_preempted_at="2026-11-30T07:59:50Z"),
            {"id": "r", "tier": 3, "state": "running", "gpus_per_node": 8, "nodes": 1,
             "started_at": "2026-11-30T00:00:00Z", "checkpoint": {"restore_s": 60},
             "placement": [{"node": "n1", "gpus": list(range(8))}]}]
    return {"version": 1, "now": NOW, "storage": [], "nodes": nodes, "jobs": jobs,
            "policy": {}}


class After(Budget):
    """A wall-clock budget with ``left`` seconds left for ``n`` looks at the clock,
    none after (a stand-in for a clock)."""

    def __init__(self, n: int, left: float = 60.0):
        super().__init__(60.0)
        self.n, self._left = n, left

    def left(self) -> float:
        self.n -= 1
        return self._left if self.n >= 0 else 0.0


def test_a_greedy_run_stops_at_its_budget_with_the_jobs_it_reached_placed() -> None:
    s = load_snapshot(_snap())
    problem = build_problem(s)
    whole = GreedyPlanner(problem).solve()
    # a whole run: a takes the free node n0; b evicts r and takes 6 GPUs of n1, c the
    # other 2; d (tier 3) may evict nobody and finds no GPU left
    assert sorted(whole.placements) == ["a", "b", "c"] and whole.victims == {"r"}
    assert objective_of(problem, whole).admitted_gpus == {"1": 8, "2": 8, "3": 0}
    g = GreedyPlanner(problem)
    # the run looks at the clock once before its loop and once per job: a is reached,
    # the budget ends before b
    cut = g.solve(After(2))
    assert sorted(cut.placements) == ["a"] and cut.victims == set()
    assert cut.placements["a"] == whole.placements["a"]
    assert g.unreached == ["b", "c", "d"] and g.free_only == []  # e (held) not among them
    p = assemble(problem, cut, "feasible", SolverInfo(engine="test", status="TEST"),
                 unreached=g.unreached)
    assert verify(s, p) == []
    reasons = {d.job: (d.reason, d.detail) for d in p.deferred}
    assert {j: r[0] for j, r in reasons.items()} == {
        "b": "OUTRANKED", "c": "OUTRANKED", "d": "OUTRANKED", "e": "COOLDOWN"}
    assert all("not considered" in reasons[j][1] for j in "bcd")
    # with quick searches: the time left (0 s) does not hold the jobs (a, b, c, d) on
    # free GPUs alone, and they take free GPUs only: a finds n0; none is free after,
    # so b and c, which a whole run places by evicting r, wait
    g = GreedyPlanner(problem)
    cut = g.solve(After(10, left=1e-6), quick=1e-4)
    assert sorted(cut.placements) == ["a"] and cut.victims == set()
    assert g.free_only == ["a", "b", "c"] and g.unreached == []  # d may evict nobody
    p = assemble(problem, cut, "feasible", SolverInfo(engine="test", status="TEST"),
                 free_only=[j for j in g.free_only if j not in cut.placements])
    assert verify(s, p) == []
    reasons = {d.job: (d.reason, d.detail) for d in p.deferred}
    assert reasons["b"][0] == reasons["c"][0] == "OUTRANKED"
    assert "time limit ended before evictions for it were considered" in reasons["b"][1]
    # ``later``: the run may go on until what the plan holds needs of a 60 s budget is
    # left: 59 s, plus 0.4 s per placed job and per victim: 1 s left at a, 0.6 s at b
    # (a placed), -0.2 s at c (a and b placed, r evicted)
    g = GreedyPlanner(problem)
    cut = g.solve(After(0), later=CutKeep(Budget(60.0), 59.0, 0.4, 0.0))
    assert sorted(cut.placements) == ["a", "b"] and cut.victims == {"r"}
    assert g.unreached == ["c", "d"] and g.free_only == []
    assert GreedyPlanner(problem).solve(After(0), later=CutKeep(Budget(60.0), 0.0, 0.0, 0.0)
                                        ).placements == whole.placements
    none = GreedyPlanner(problem)
    assert none.solve(Budget(0.0)).placements == {} and none.unreached == ["a", "b", "c", "d"]
    assert GreedyPlanner(problem).solve(Budget(60.0)).placements == whole.placements
    det = GreedyPlanner(problem)  # a deterministic budget never ends a run
    assert det.solve(Budget(0.0, wall=False)).placements == whole.placements
    assert det.unreached == [] and det.free_only == []


def test_quick_searches_keep_the_first_tiers_search_for_victims() -> None:
    # a second tier-1 job, a2 (8 GPUs): a whole run places a on the free n0 and a2 on
    # n1 by evicting r. With quick searches of 1e-4 s and 2.5e-4 s left at each look,
    # the time would not hold the five jobs left (a, a2, b, c, d) on free GPUs alone
    # (5e-4 s), but the first tier counts only its own: 2e-4 s at a, 1e-4 s at a2, so
    # both search for victims; tier 2 counts every job left (3e-4 s at b): b and c
    # take free GPUs only, and none is left
    snap = _snap()
    snap["jobs"].append({"id": "a2", "tier": 1, "state": "pending", "gpus_per_node": 8,
                         "priority": 10, "topology": "any"})
    problem = build_problem(load_snapshot(snap))
    g = GreedyPlanner(problem)
    cut = g.solve(After(100, left=2.5e-4), quick=1e-4)
    assert sorted(cut.placements) == ["a", "a2"] and cut.victims == {"r"}
    assert g.free_only == ["b", "c"] and g.unreached == []
    assert objective_of(problem, cut).admitted_gpus == {"1": 16, "2": 0, "3": 0}
    # where one search for victims may take 1e-4 s (search_s: a shape's heap built on
    # a big cluster), tier 1 needs 2e-4 + 1e-4 = 3e-4 s at a, more than the 2.5e-4 s
    # left: every job takes free GPUs only; a finds n0, a2 nothing
    g = GreedyPlanner(problem)
    cut = g.solve(After(100, left=2.5e-4), quick=1e-4, search_s=1e-4)
    assert sorted(cut.placements) == ["a"] and cut.victims == set()
    assert g.free_only == ["a", "a2", "b", "c"] and g.unreached == []


def test_a_cut_run_keeps_time_for_each_job_it_searched_and_deferred() -> None:
    # r started a minute ago: tier 3's 30 minutes of immunity (R6) protect it, so
    # only a (n0) can start. Order a, a2, b, c, d. Kept of a 60 s budget: 58 s plus
    # 1 s per job searched and deferred (explained in full): 2 s left at a (placed),
    # 2 s at a2 (deferred: nothing free, r protected), 1 s at b (deferred), 0 s at c
    snap = _snap()
    snap["jobs"].insert(1, {"id": "a2", "tier": 1, "state": "pending", "gpus_per_node": 8,
                            "priority": 5, "topology": "any"})
    snap["jobs"][-1]["started_at"] = "2026-11-30T07:59:00Z"
    problem = build_problem(load_snapshot(snap))
    g = GreedyPlanner(problem)
    cut = g.solve(After(0), later=CutKeep(Budget(60.0), 58.0, 0.0, 1.0))
    assert sorted(cut.placements) == ["a"] and cut.victims == set()
    assert g.unreached == ["c", "d"]
    # at 0.4 s per deferred job the run reaches every job (c and d deferred too)
    g = GreedyPlanner(problem)
    cut = g.solve(After(0), later=CutKeep(Budget(60.0), 58.0, 0.0, 0.4))
    assert sorted(cut.placements) == ["a"] and g.unreached == []


def test_a_cut_run_keeps_time_for_each_victim_apart() -> None:
    # The whole run: a on n0, b evicting r on n1, c on r's other 2 GPUs; d finds
    # nothing. Kept of a 60 s budget: 58 s plus 2 s per victim, nothing per placed
    # job: 2 s left at a and at b (no victim yet), none at c once b has evicted r, so
    # c and d are not reached. Where victims count as placed jobs (no per_victim),
    # at nothing each the run reaches every job; at 2 s each it stops after a.
    problem = build_problem(load_snapshot(_snap()))
    g = GreedyPlanner(problem)
    cut = g.solve(After(0), later=CutKeep(Budget(60.0), 58.0, 0.0, 0.0, 2.0))
    assert sorted(cut.placements) == ["a", "b"] and cut.victims == {"r"}
    assert g.unreached == ["c", "d"] and g.deferred == 0
    g = GreedyPlanner(problem)
    cut = g.solve(After(0), later=CutKeep(Budget(60.0), 58.0, 0.0, 0.0))
    assert sorted(cut.placements) == ["a", "b", "c"] and g.unreached == []
    assert g.deferred == 1  # (d: searched, nothing left for it)
    g = GreedyPlanner(problem)
    cut = g.solve(After(0), later=CutKeep(Budget(60.0), 58.0, 2.0, 0.0))
    assert sorted(cut.placements) == ["a"] and g.unreached == ["b", "c", "d"]


def test_with_no_time_left_solve_cpsat_returns_a_valid_plan_saying_what_it_did_not_consider(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A limit of 1 ns has ended before the first greedy run starts: the run gets
    # FIRST_LEAST_S, here 0, and reaches no job.
    # The plan places nothing, evicts nothing, passes the verifier, and says why.
    monkeypatch.setattr(cpsat, "FIRST_LEAST_S", 0.0)
    s = load_snapshot(_snap())
    problem = build_problem(s)
    p = cpsat.solve_cpsat(problem, time_limit_s=1e-9)
    assert p.placements == [] and p.evictions == []
    assert verify(s, p) == []
    assert {d.job: d.reason for d in p.deferred} == {
        "a": "OUTRANKED", "b": "OUTRANKED", "c": "OUTRANKED", "d": "OUTRANKED",
        "e": "COOLDOWN"}
    assert all("not considered" in d.detail for d in p.deferred if d.reason == "OUTRANKED")
    assert "0 pending job(s) after it could take only free GPUs (0 found none), 4 were " \
        "not considered" in p.solver.detail
    # with the time, the same call places a, b and c (16 GPUs) and says nothing of it
    whole = cpsat.solve_cpsat(problem, time_limit_s=1.0, deterministic=True)
    assert sorted(x.job for x in whole.placements) == ["a", "b", "c"]
    assert whole.objective.admitted_gpus == {"1": 8, "2": 8, "3": 0}
    assert "considered" not in whole.solver.detail


def test_a_plan_cut_short_says_where_the_time_went(monkeypatch: pytest.MonkeyPatch) -> None:
    # plan() gives solve_cpsat at least LEAST_S, here 1 us, and the greedy run's loop
    # FIRST_LEAST_S, here 0: nothing is reached, and the detail says so and where the
    # time went, as a plan over its limit does (this one ends within OVER_S of it)
    import planner

    monkeypatch.setattr(planner, "LEAST_S", 1e-6)
    monkeypatch.setattr(cpsat, "FIRST_LEAST_S", 0.0)
    p = planner.plan(_snap(), time_limit_s=1e-9)
    assert p.placements == [] and p.evictions == []
    assert "4 were not considered" in p.solver.detail
    assert "loading the snapshot and building the problem" in p.solver.detail
    assert ", of the time limit of 1e-09 s: " in p.solver.detail


def test_the_time_limit_counts_from_the_call_warm_up_included(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the first plan() of a process imports OR-Tools and measures the machine's speed
    # (planner.warm_up): a stand-in that takes 0.3 s is inside the plan's wall time,
    # and a plan of 0.2 s then says it went over, and why
    import time

    import planner

    def slow_warm_up(deterministic: bool = False) -> float:
        time.sleep(0.3)
        return 1.0

    monkeypatch.setattr(planner, "warm_up", slow_warm_up)
    p = planner.plan(_snap(), time_limit_s=0.2)
    assert p.solver.wall_s >= 0.3
    assert "over the time limit of 0.2 s: 0.3" in p.solver.detail
    assert "s importing the solver and measuring this machine's speed" in p.solver.detail
    assert not verify(load_snapshot(_snap()), p)


def test_free_first_places_each_tier_on_free_gpus_before_searching_for_victims() -> None:
    # free_first (the first greedy run at a short limit on a big cluster): each tier's
    # jobs on free GPUs alone, then those not placed that may evict, searched for
    # victims: the work is a (free), a (victims); b, c (free), b, c (victims); d (free:
    # tier 3 may evict nobody). A job its free pass placed is not looked at again
    s = load_snapshot(_snap())
    problem = build_problem(s)
    whole = GreedyPlanner(problem).solve()
    g = GreedyPlanner(problem)
    assert g.solve(free_first=True).placements == whole.placements  # the same whole run
    # clock looks: 1 before the loop, a (free: n0), b (free: none), c (free: none),
    # then none left at b's search for victims: c's free pass ran, d's did not
    g = GreedyPlanner(problem)
    cut = g.solve(After(4), free_first=True)
    assert sorted(cut.placements) == ["a"] and cut.victims == set()
    assert g.free_only == ["b", "c"] and g.unreached == ["d"]
    p = assemble(problem, cut, "feasible", SolverInfo(engine="test", status="TEST"),
                 unreached=g.unreached, free_only=g.free_only)
    assert verify(s, p) == []
    # no look left in the loop: no free pass ran, every job is not considered
    g = GreedyPlanner(problem)
    assert g.solve(After(1), free_first=True).placements == {}
    assert g.unreached == ["a", "b", "c", "d"] and g.free_only == []
    # one look more than above: b evicts r and takes 6 GPUs of n1; c's search is cut
    g = GreedyPlanner(problem)
    cut = g.solve(After(5), free_first=True)
    assert sorted(cut.placements) == ["a", "b"] and cut.victims == {"r"}
    assert g.free_only == ["c"] and g.unreached == ["d"]
    # with quick searches and no time left, a tier's search for victims is skipped
    # (its jobs took free GPUs in their free pass) and the next tier starts afresh
    g = GreedyPlanner(problem)
    cut = g.solve(After(10, left=1e-6), quick=1e-4, free_first=True)
    assert sorted(cut.placements) == ["a"] and cut.victims == set()
    assert g.free_only == ["b", "c"] and g.unreached == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_free_first_runs_cut_anywhere_give_valid_plans(seed: int) -> None:
    # Generated clusters (gangs, NVLink, storm limits, the default R15 window), the
    # free_first run cut after every few clock looks: each plan is valid, holds at
    # least the free passes it reached, and a run never cut is as valid as a whole one
    from planner.core.decision import clean
    from planner.sim.generate import generate

    data = generate(nodes=24, pending=40, seed=seed, multinode_share=0.3)
    s = load_snapshot(data)
    problem = build_problem(s)
    whole = clean(problem, GreedyPlanner(problem).solve(free_first=True))
    assert verify(s, assemble(problem, whole, "feasible",
                              SolverInfo(engine="test", status="TEST"))) == []
    looks = 0
    for n in range(1, 200, 7):
        g = GreedyPlanner(problem)
        cut = clean(problem, g.solve(After(n), free_first=True))
        assert not set(g.unreached) & set(g.free_only)
        assert not set(cut.placements) & (set(g.unreached) | set(g.free_only))
        p = assemble(problem, cut, "feasible", SolverInfo(engine="test", status="TEST"),
                     unreached=g.unreached, free_only=g.free_only)
        assert verify(s, p) == [], n
        looks += bool(g.unreached or g.free_only)
    assert looks >= 3  # cuts fell inside the run, not only after it


def test_a_plan_whose_floor_is_a_quarter_of_its_limit_says_what_it_took(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Building the problem made to take 0.3 s more (a sleep) of a 1 s limit: the plan
    # (4 jobs, solved at once) ends within the limit and says what loading, building
    # the problem and the verifier took, at least the 0.3 s; with the build as it is
    # (a few ms) nothing is said
    from planner.core import problem as problem_mod

    quick = planner.plan(_snap(), time_limit_s=1.0)
    assert "went to loading the snapshot" not in (quick.solver.detail or "")
    real = problem_mod.build_problem

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(problem_mod, "build_problem", slow)
    p = planner.plan(_snap(), time_limit_s=1.0)
    said = re.search(r"(\d\.\d\d) s of the time limit of 1 s went to loading the snapshot "
                     r"and building the problem \((\d\.\d\d) s\) and checking the plan",
                     p.solver.detail or "")
    assert said is not None and float(said[2]) >= 0.3 and float(said[1]) >= float(said[2])


def test_a_first_run_that_cannot_be_whole_keeps_only_what_its_plan_needs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The first greedy run gets CutKeep's ``later`` where the time before the reserve
    # (about 0.45 s of 0.5 s here) would not hold a whole run: SEARCH_TIMES (7) x a
    # free search (FREE_JOB_S 1 s at speed 1) x 4 jobs (a, b, c, d; e is held) =
    # 28 s (the plan returned is still the whole one: the variants after it, on 2
    # nodes, take milliseconds). With searches of 1e-9 s a whole run fits: no
    # ``later``
    monkeypatch.setenv("PREEMPT_PLANNER_SPEED", "1")
    seen: list[Any] = []
    solve = GreedyPlanner.solve

    def spy(self: GreedyPlanner, budget: Any = None, quick: float = 0.0,
            least: float = 0.0, later: Any = None, *args: Any, **kw: Any) -> Any:
        seen.append(later)
        return solve(self, budget, quick, least, later, *args, **kw)

    monkeypatch.setattr(GreedyPlanner, "solve", spy)
    monkeypatch.setattr(cpsat, "FREE_JOB_S", 1.0)
    p = planner.plan(_snap(), time_limit_s=0.5)
    # (what it keeps per placed job and per victim at speed 1: CUT_PLACED_S 75 us and
    # CUT_VICTIM_S 0.22 ms, times CUT_SAFETY 1.25, whatever the cluster's size)
    assert isinstance(seen[0], CutKeep) and seen[0].per_placed == pytest.approx(9.375e-5)
    assert seen[0].per_victim == pytest.approx(2.75e-4)
    assert sorted(x.job for x in p.placements) == ["a", "b", "c"]
    seen.clear()
    monkeypatch.setattr(cpsat, "FREE_JOB_S", 1e-9)
    p = planner.plan(_snap(), time_limit_s=0.5)
    assert seen[0] is None
    assert sorted(x.job for x in p.placements) == ["a", "b", "c"]


def test_a_plan_whose_plain_greedy_floor_was_cut_short_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The plain greedy plan (the greedy baseline's) is the floor of a CP-SAT plan; here
    # it gets no time (a budget already over: it reaches none of a, b, c and d, the
    # jobs that may start; e is in its cooldown) and the whole model is out of reach,
    # so the plan is the spare variant's (a on n0, b and c on n1 evicting r: 8/8/0)
    # and says that the greedy planner run to its end may find a better one
    from planner.solver import portfolio

    real = portfolio.Greedy.run

    def starved(self: Any, problem: Any, budget: Budget) -> Any:
        return real(self, problem, Budget(0.0) if self.settings == {} else budget)

    monkeypatch.setattr(portfolio.Greedy, "run", starved)
    monkeypatch.setattr(cpsat._Run, "short", lambda self: 1.0)
    # (no bound from another lane, which would prove this plan optimal)
    monkeypatch.setattr(portfolio.BoundLane, "start", lambda *_a: False)
    p = planner.plan(_snap(), time_limit_s=1.0)
    assert p.objective.admitted_gpus == {"1": 8, "2": 8, "3": 0} and p.status != "optimal"
    assert ("the time left too little for the plain greedy plan (the greedy baseline's): "
            "it did not reach 4 pending job(s), so the greedy planner, run to its end, may "
            "find a better plan") in (p.solver.detail or "")
    # with its time, the floor says nothing
    monkeypatch.setattr(portfolio.Greedy, "run", real)
    q = planner.plan(_snap(), time_limit_s=1.0)
    assert "plain greedy plan" not in (q.solver.detail or "")


@pytest.mark.parametrize(("speed", "scale"), [("0.5", 0.84), ("1", 1.0), ("2", 2.0)])
def test_a_cut_run_keeps_its_assembly_time_scaled_by_084_at_least(
        monkeypatch: pytest.MonkeyPatch, speed: str, scale: float) -> None:
    # What a cut first greedy run keeps for the plan's assembly and checks: 11 us per
    # usable node, 75 us per placed job, 0.22 ms per victim, 0.05 ms per deferred job
    # searched, times CUT_SAFETY 1.25 and the speed factor but 0.84 at least (on a
    # quick machine the work after the cut sped up less than the factor), plus the
    # reserve's margin (20 ms times the factor). At 1,000 usable nodes and speed 0.5:
    # 0.84 x 1.25 x 11 ms + 10 ms = 21.55 ms. A plan of 100 jobs, 20 victims and 10
    # jobs deferred at speed 1 keeps 1.25 x (11 + 7.5 + 4.4 + 0.5) ms + 20 ms.
    monkeypatch.setenv("PREEMPT_PLANNER_SPEED", speed)
    keep = cpsat.cut_keep(Budget(1.0), 1000)
    f = float(speed)
    assert keep.fixed == pytest.approx(scale * 1.25 * 0.011 + 0.02 * f)
    assert keep.per_placed == pytest.approx(scale * 1.25 * 7.5e-5)
    assert keep.per_victim == pytest.approx(scale * 1.25 * 2.2e-4)
    assert keep.per_deferred == pytest.approx(scale * 1.25 * 5e-5)
    if speed == "1":
        assert keep.keep_s(100, 10, 20) == pytest.approx(1.25 * 0.0234 + 0.02)


def test_the_plain_greedy_floor_runs_into_the_reserve_as_the_first_run_may(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A reserve for assembly and checks of all but 1 ms of the 1 s limit leaves no
    # time to improve the plan once the first run ends; the plain greedy plan (the
    # floor) still runs within the part of the reserve the first run may use
    # (min(reserve / 2, 2 x FIRST_LEAST_S) past it), so the plan is the floor's: no
    # eviction. Polishing (which would move g to free nodes too) changes nothing here,
    # and the reserve is not lowered after the first run (RESERVE_FIT_TIMES).
    from planner.solver import portfolio

    monkeypatch.setattr(cpsat, "_reserve", lambda problem, t, det: t - 0.001)
    monkeypatch.setattr(cpsat, "RESERVE_FIT_TIMES", 1e6)
    monkeypatch.setattr(portfolio, "polish", lambda problem, d, budget, **kw: (d, ""))
    snap = gang_tick(NOW)
    problem = build_problem(load_snapshot(snap))
    first = GreedyPlanner(problem, spare_lower=True).solve()
    assert first.victims == {"r1", "r2"}
    p = planner.plan(snap, time_limit_s=1.0)
    assert verify(load_snapshot(snap), p) == []
    assert p.objective.admitted_gpus == {"1": 16, "2": 0, "3": 8}
    assert p.evictions == [] and p.objective.eviction_cost_gpu_s == 0


def test_the_reserve_is_lowered_to_what_the_first_whole_plan_needs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # At speed 1 a plan of the 5-node tick (g and low placed, r1 and r2 evicted: 4;
    # no other pending job deferred) needs reserve_keep's 5 x 12 us + 20 ms margin + 4 x
    # 0.16 ms = 20.70 ms for its assembly and checks; 1.25 times that is 25.9 ms,
    # below 5% of the 1 s limit plus the margin (70 ms): the reserve becomes 70 ms
    # and the time to improve the plan ends 70 ms before the limit. A reserve already
    # lower stays as it is. At 0.1 s, 1.25 x the keep is above 5% plus the margin.
    monkeypatch.setenv("PREEMPT_PLANNER_SPEED", "1")
    problem = build_problem(load_snapshot(gang_tick(NOW)))
    d = GreedyPlanner(problem, spare_lower=True).solve()
    assert len(d.placements) + len(d.victims) == 4
    budget = Budget(1.0)
    run = cpsat._Run(problem, budget, workers=1, seed=0, log=False, prune=True)
    run.reserve, run.work = 0.9, budget.less(0.9)
    run.end = run.work
    work = run._fit_reserve(d)
    assert run.reserve == pytest.approx(0.07)
    assert work is run.work and run.end is run.work
    assert run.work.end == pytest.approx(budget.end - 0.07)
    # (the rule's numbers: 1.25 x the keep is below the 5% floor here)
    keep = cpsat.reserve_keep(budget, 5).keep_s(4, 0)
    assert keep == pytest.approx(5 * 1.2e-5 + 0.02 + 4 * 1.6e-4)
    run.reserve, run.work = 0.05, budget.less(0.05)
    run._fit_reserve(d)
    assert run.reserve == 0.05 and run.work.end == pytest.approx(budget.end - 0.05)
    # at a limit of 0.1 s the 5% floor is 25 ms: 1.25 x 20.70 ms = 25.875 ms is kept
    short = Budget(0.1)
    run = cpsat._Run(problem, short, workers=1, seed=0, log=False, prune=True)
    run.reserve, run.work = 0.09, short.less(0.09)
    run._fit_reserve(d)
    assert run.reserve == pytest.approx(0.025875)


def test_the_greedy_loop_gets_its_least_time_after_its_set_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # With hundreds of thousands of pending jobs, a run's set-up (the order, each
    # tier's free passes) takes seconds; the loop still gets ``least`` seconds from
    # its start. Here the set-up of a free-first run is slowed by 0.3 s (each tier's
    # grouping sleeps) and the budget is already over: with least = 0.2 s counted
    # from the loop's start, a (tier 1, n0's free GPUs) and b and c (tier 2, on r's
    # GPUs after their free passes) are placed as by a whole run; counted from before
    # the set-up the loop would reach none.
    import itertools

    from planner.heuristics import greedy as greedy_mod

    def slow_groupby(*a: Any, **kw: Any) -> Any:
        time.sleep(0.3)
        return itertools.groupby(*a, **kw)

    monkeypatch.setattr(greedy_mod, "groupby", slow_groupby)
    problem = build_problem(load_snapshot(_snap()))
    g = GreedyPlanner(problem)
    d = g.solve(Budget(0.0), least=0.2, free_first=True)
    assert sorted(d.placements) == ["a", "b", "c"] and d.victims == {"r"}
    assert g.unreached == []


def test_how_much_more_time_the_model_needs_in_words() -> None:
    # solver.detail's estimate: tenths of a second below a minute (at least 0.1 s),
    # minutes below an hour, then "more than an hour" (a queue of 800,000 jobs on
    # 256 nodes estimated some 4 million seconds)
    assert cpsat._more(0.02) == "about 0.1 s more"
    assert cpsat._more(1.24) == "about 1.2 s more"
    assert cpsat._more(59.9) == "about 59.9 s more"
    assert cpsat._more(150.0) == "about 2 min more"  # (2.5 rounds to even)
    assert cpsat._more(3969955.1) == "more than an hour more"


def test_the_cut_keep_holds_the_deferrals_made_without_a_search(monkeypatch: Any) -> None:
    # a flooded queue: the reduction defers 100,000 jobs without a search, each
    # explained in a line, checked and freed after the plan (bench_flood: some 0.4 s).
    # At speed 1 the keep of a first greedy run cut short holds 100,000 x CUT_LINE_S
    # (4.8 us) x CUT_SAFETY (1.25) = 0.6 s more for them
    monkeypatch.setenv("PREEMPT_PLANNER_SPEED", "1")
    whole = Budget(10.0)
    flooded = cpsat.cut_keep(whole, 256, 100_000).keep_s(0, 0)
    assert flooded - cpsat.cut_keep(whole, 256).keep_s(0, 0) == pytest.approx(0.6)
