"""The second lane (planner/solver/lanes.py): Python work in a forked child process.

The mechanics first (a result, a failure, a late child, a dead child, when lanes
are allowed), then the planner's use of it: on a cluster where the whole model is
skipped, the child's plan is returned when it is better, the parent's otherwise,
and never with ``workers=1`` or in deterministic mode.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any

import pytest

from models import load_snapshot
from planner import plan
from planner.checks.verify import verify
from planner.core.budget import Budget
from planner.core.decision import Decision
from planner.core.problem import build_problem
from planner.solver import cpsat, lanes, portfolio
from planner.solver.lanes import Lane

fork_only = pytest.mark.skipif(not lanes.available(2), reason="needs fork and two cores")


def _pid_and_sum(xs: list[int]) -> tuple[int, int]:
    return os.getpid(), sum(xs)


def _boom() -> None:
    raise ValueError("boom")


def _sleep() -> int:
    time.sleep(30)
    return 1


def _die() -> None:
    os._exit(3)


def _unpicklable() -> Any:
    return lambda: 1  # a lambda does not pickle


@fork_only
def test_a_lane_returns_what_the_child_computed() -> None:
    lane = Lane(_pid_and_sum, [1, 2, 3, 4])
    pid, total = lane.result(Budget(30))
    assert total == 10
    assert pid != os.getpid()  # computed in another process
    assert lane.error is None


@fork_only
def test_a_failing_child_gives_none_and_says_why() -> None:
    lane = Lane(_boom)
    assert lane.result(Budget(30)) is None
    assert lane.error == "failed (ValueError: boom)"


@fork_only
def test_a_late_child_is_killed() -> None:
    lane = Lane(_sleep)
    assert lane.result(Budget(0.05)) is None
    assert lane.error == "late"
    assert not lane._proc.is_alive()


@fork_only
def test_a_result_that_does_not_pickle_gives_none_and_says_why(
        capfd: pytest.CaptureFixture[str]) -> None:
    lane = Lane(_unpicklable)
    assert lane.result(Budget(30)) is None
    assert lane.error == ("failed (AttributeError sending the result: Can't pickle local "
                          "object '_unpicklable.<locals>.<lambda>')")
    assert capfd.readouterr().err == ""  # no traceback from the child


def _sigterm_handled() -> str:
    import signal

    return "handled" if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL else "default"


@fork_only
def test_the_child_leaves_sigterm_to_the_parent() -> None:
    # The Slurm loop (planner/adapters/slurm/run.py) traps SIGTERM to stop after its tick; a
    # child forked from it must not run that handler (it would log a second stop):
    # it gets the default action back.
    import signal

    previous = signal.signal(signal.SIGTERM, lambda *_a: None)
    try:
        lane = Lane(_sigterm_handled)
        assert lane.result(Budget(30)) == "default"
    finally:
        signal.signal(signal.SIGTERM, previous)


@fork_only
def test_a_child_that_dies_gives_none() -> None:
    lane = Lane(_die)
    assert lane.result(Budget(30)) is None
    assert lane.error == "died (EOFError)"


def _answers(xs: list[int]) -> Any:
    yield sum(xs)
    yield max(xs)


def _answers_slowly(xs: list[int]) -> Any:
    import time

    time.sleep(0.2)  # (the parent asks for no more meanwhile)
    yield sum(xs)
    yield max(xs)


@fork_only
def test_a_lane_gives_a_generators_answers_one_at_a_time() -> None:
    # each value the child's generator yields is an answer of its own: the first
    # collected with more=True leaves the child to give the next; the last closes it
    lane = Lane(_answers, [1, 2, 3, 4])
    assert lane.result(Budget(30), more=True) == 10
    assert lane.result(Budget(30)) == 4
    assert lane.result(Budget(30)) is None and lane.error == "died (OSError)"
    # stop(): the child gives the answer it is on, and no more
    lane = Lane(_answers_slowly, [1, 2, 3, 4])
    lane.stop()
    assert lane.result(Budget(30), more=True) == 10
    assert lane.result(Budget(30)) is None and lane.error == "died (EOFError)"


def test_lanes_need_two_workers_and_no_other_thread() -> None:
    assert not lanes.available(1)
    if lanes.cores() < 2 or "fork" not in __import__("multiprocessing").get_all_start_methods():
        pytest.skip("needs fork and two cores")
    assert lanes.available(2)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not lanes.available(2)  # forking with a running thread is not safe
    finally:
        stop.set()
        t.join()
    assert lanes.available(2)


# -- the planner's use ---------------------------------------------------------------
# Both nodes free. The greedy planner takes k (priority 20, needs no NVLink) first,
# on n1; j (priority 10) needs 8 NVLink-connected GPUs, which only n1 has (n2 has
# NVLink pairs), and waits: 8 tier-2 GPUs. Only the ejection move (k to n2, j to
# n1) admits both: 16 tier-2 GPUs, priority value 20 x 8 + 10 x 8 = 240.

def _snap() -> dict[str, Any]:
    def node(nid: str, nvlink: Any) -> dict[str, Any]:
        return {"id": nid, "gpus": 8, "block": "b1", "nvlink": nvlink}

    def job(jid: str, priority: int, topology: str) -> dict[str, Any]:
        return {"id": jid, "tier": 2, "state": "pending", "gpus_per_node": 8, "nodes": 1,
                "priority": priority, "topology": topology}

    return {"version": 1, "now": "2026-11-30T08:00:00Z", "storage": [],
            "nodes": [node("n1", "nvswitch"), node("n2", [[0, 1], [2, 3], [4, 5], [6, 7]])],
            "jobs": [job("k", 20, "any"), job("j", 10, "nvlink")], "policy": {}}


@pytest.fixture
def forced_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this two-node cluster take the path of a big one (the whole model skipped,
    a second lane allowed), and keep ejection moves and squeaky-wheel passes (which
    place j first) out of the parent process, so that only the child can admit j."""
    monkeypatch.setattr(cpsat, "NEIGHBOURHOOD_NODES", 0)  # "more usable nodes than that"
    monkeypatch.setattr(portfolio, "SOLVE_TIMES_EXACT", 1e9)  # the model never fits
    parent, eject, squeaky = os.getpid(), portfolio.eject, portfolio.squeaky_wheel
    monkeypatch.setattr(portfolio, "eject", lambda problem, d, **kw:
                        (d, 0) if os.getpid() == parent else eject(problem, d, **kw))
    monkeypatch.setattr(portfolio, "squeaky_wheel", lambda problem, d, **kw:
                        d if os.getpid() == parent else squeaky(problem, d, **kw))


def _admitted(p: Any) -> int:
    return p.objective.admitted_gpus["2"]


@fork_only
@pytest.mark.usefixtures("forced_lane")
def test_the_second_lanes_plan_is_returned_when_better() -> None:
    snap = _snap()
    p = plan(snap, time_limit_s=0.5)
    assert _admitted(p) == 16 and p.objective.priority_value == 240
    assert sorted(p.placements[i].job for i in range(2)) == ["j", "k"]
    # in the child the priority-first variant defers j too, and its squeaky-wheel pass,
    # placing j first, admits both
    # (both on free GPUs: optimal, and the tick ends)
    assert p.status == "optimal" and p.solver.detail == (
        "the second lane's greedy plan (a second pass, deferred jobs first), better, "
        "returned; it places every pending job that may start on free GPUs: optimal, "
        "nothing to improve")
    assert verify(load_snapshot(snap), p) == []


@pytest.mark.usefixtures("forced_lane")
def test_one_worker_plans_in_one_lane() -> None:
    p = plan(_snap(), time_limit_s=0.5, workers=1)
    assert _admitted(p) == 8  # the parent's plan: j waits
    assert "second lane" not in p.solver.detail


@fork_only
@pytest.mark.usefixtures("forced_lane")
def test_a_failed_second_lane_leaves_the_first_lanes_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: Any) -> None:
        raise RuntimeError("no luck")

    monkeypatch.setattr(portfolio, "second_lane", broken)
    p = plan(_snap(), time_limit_s=0.5)
    assert _admitted(p) == 8
    assert "the second lane gave no plan (failed (RuntimeError: no luck))" in p.solver.detail


@pytest.mark.usefixtures("forced_lane")
def test_deterministic_mode_never_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("no second lane in deterministic mode")

    monkeypatch.setattr(portfolio, "Lane", refuse)
    p = plan(_snap(), time_limit_s=0.5, deterministic=True)
    assert "second lane" not in p.solver.detail


def _spy_lanes(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Events in order: ("lane", its candidates) when a second lane starts (a spy
    that never answers), ("greedy",) for each greedy plan of the first lane. The
    cluster takes the path of a big one, as in forced_lane."""
    events: list[tuple] = []

    class Spy:
        error = None

        def __init__(self, fn: Any, _problem: Any, *args: Any) -> None:
            events.append(("floor",) if fn is portfolio.floor_and_bound
                          else ("lane", args[0]))

        def result(self, _budget: Budget, **_kw: Any) -> None:
            return None

        def stop(self) -> None:
            pass

        def close(self) -> None:
            pass

    solve = cpsat.GreedyPlanner.solve

    def logged(self: Any, *args: Any) -> Any:
        events.append(("greedy",))
        return solve(self, *args)

    monkeypatch.setattr(cpsat.GreedyPlanner, "solve", logged)
    monkeypatch.setattr(cpsat, "NEIGHBOURHOOD_NODES", 0)
    monkeypatch.setattr(cpsat, "FLOOR_LANE_PAIRS", 0)
    monkeypatch.setattr(portfolio, "SOLVE_TIMES_EXACT", 1e9)
    monkeypatch.setattr(portfolio, "BASELINE_RUNS", {"k8s": 1e6, "slurm": 1e6})  # never room
    # for a baseline here
    monkeypatch.setattr(portfolio, "lane_runs", lambda _c: 0.0)  # but a lane starts
    monkeypatch.setattr(cpsat, "lanes_available", lambda _w: True)
    monkeypatch.setattr(portfolio, "Lane", Spy)
    return events


def _budget_snap(policy: dict[str, Any]) -> dict[str, Any]:
    # n1 is held by tier-3 job t3 (all 8 GPUs); tier-2 job j needs 8 NVLink GPUs,
    # which only n1 has
    snap = _snap()
    snap["jobs"] = [snap["jobs"][1],  # j, NVLink
                    {"id": "t3", "tier": 3, "state": "running", "gpus_per_node": 8,
                     "nodes": 1, "priority": 5, "started_at": "2026-11-30T04:00:00Z",
                     "checkpoint": {"restore_s": 100},
                     "placement": [{"node": "n1", "gpus": list(range(8))}]}]
    snap["policy"] = policy
    return snap


def test_with_an_eviction_budget_the_lane_starts_early_with_the_per_node_baselines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # With max_evicted_gpu_fraction 0.25 (4 of the 16 GPUs) the budget refuses t3 (8
    # GPUs): j waits. (With no victim allowed at all, R13 at 0, j would be left out
    # of the search: planner/core/reduce.py.) The policy has a
    # budget and the whole model is out of reach, so the second lane starts before
    # the first greedy plan, with the Kubernetes-style baseline, then the
    # Slurm-style one, then the priority-first variant (_Run.early_lane); the first
    # lane runs neither baseline.
    events = _spy_lanes(monkeypatch)
    p = plan(_budget_snap({"max_evicted_gpu_fraction": 0.25}), time_limit_s=0.5)
    assert p.objective.admitted_gpus == {"1": 0, "2": 0, "3": 0}
    assert events[0] == ("lane", ["k8s", "slurm", cpsat.PRIORITY_FIRST])
    assert events[1:] == [("greedy",)] * (len(events) - 1)
    assert "the second lane gave no plan (no time for one more greedy run)" in p.solver.detail


def test_without_a_budget_the_lane_starts_after_the_first_greedy_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # No budget: t3 is evicted and j admitted by the first greedy plan; the lane
    # starts after it, with the priority-first variant only (the storm limit
    # refused nothing, no budget bound). The floor lane (the plain greedy plan)
    # starts before the first greedy plan; the spy never answers, so the first lane
    # makes that plan itself at the end (the last greedy run)
    events = _spy_lanes(monkeypatch)
    p = plan(_budget_snap({}), time_limit_s=0.5)
    assert p.objective.admitted_gpus == {"1": 0, "2": 8, "3": 0}
    assert events[:3] == [("floor",), ("greedy",), ("lane", [cpsat.PRIORITY_FIRST])]
    assert events[-1] == ("greedy",)
    # With fewer (job, candidate node) pairs to search than FLOOR_LANE_PAIRS (here
    # one, j's only candidate being n1, against 3), the plain greedy run takes less
    # than a fork and its wait (a loop's steady ticks): no floor lane, the plain
    # plan is made in this process
    events.clear()
    monkeypatch.setattr(cpsat, "FLOOR_LANE_PAIRS", 3)
    p = plan(_budget_snap({}), time_limit_s=0.5)
    assert p.objective.admitted_gpus == {"1": 0, "2": 8, "3": 0}
    assert ("floor",) not in events
    assert events[:2] == [("greedy",), ("lane", [cpsat.PRIORITY_FIRST])]


def test_where_an_eviction_budget_binds_the_baselines_run_in_the_second_lane_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # n1 and n2 each held by an 8-GPU tier-3 job; tier-2 jobs a and b (8 GPUs each)
    # wait. R15: B = max(4, floor(0.05 x 2)) = 4 victims per window, 3 already in it:
    # one left. The first greedy plan evicts t3a for a and the window refuses b's
    # victim (an eviction budget bound): the second lane starts at once with the
    # Kubernetes- and Slurm-style baselines first, and the first greedy plan as the
    # hint of its tier items' bound; this process runs neither baseline (the spy lane
    # never answers: the plan is this process's)
    events = _spy_lanes(monkeypatch)
    hints: list[Any] = []
    spy = portfolio.Lane

    def with_hint(fn: Any, problem: Any, *args: Any) -> Any:
        if fn is portfolio.second_lane:
            hints.append(args[-1])
        return spy(fn, problem, *args)

    monkeypatch.setattr(portfolio, "Lane", with_hint)
    monkeypatch.setattr(portfolio, "BASELINE_RUNS", {"k8s": 0.0, "slurm": 0.0})  # room
    ran: list[str] = []
    run = portfolio.Baseline.run

    def logged(self: Any, *args: Any) -> Any:
        ran.append(self.name)
        return run(self, *args)

    monkeypatch.setattr(portfolio.Baseline, "run", logged)

    def held(jid: str, node: str) -> dict[str, Any]:
        return {"id": jid, "tier": 3, "state": "running", "gpus_per_node": 8, "nodes": 1,
                "priority": 5, "started_at": "2026-11-30T04:00:00Z",
                "checkpoint": {"restore_s": 100},
                "placement": [{"node": node, "gpus": list(range(8))}]}

    snap = _snap()
    snap["nodes"][1]["nvlink"] = "nvswitch"
    snap["jobs"] = [held("t3a", "n1"), held("t3b", "n2"),
                    *({"id": j, "tier": 2, "state": "pending", "gpus_per_node": 8,
                       "nodes": 1, "priority": 10, "submitted_at": "2026-11-30T06:00:00Z"}
                      for j in ("a", "b"))]
    snap["policy"] = {"reserve": None, "thrash": {"max_fraction": 0.05, "min_evictions": 4}}
    snap["recent_evictions"] = [{"job": f"x{k}", "at": f"2026-11-30T07:{10 + k}:00Z",
                                 "gpus": 1} for k in range(3)]
    p = plan(snap, time_limit_s=0.5)
    assert p.objective.admitted_gpus == {"1": 0, "2": 8, "3": 0}
    assert events[events.index(("greedy",)) + 1] == (
        "lane", ["k8s", "slurm", cpsat.PRIORITY_FIRST])
    assert ran == []
    assert len(hints) == 1 and sorted(hints[0].placements) == ["a"]
    assert hints[0].victims == {"t3a"}


@pytest.mark.parametrize("policy", [{}, {"max_evicted_gpu_fraction": 0.25}])
def test_a_run_too_short_for_a_whole_greedy_plan_forks_no_lane_before_it(
        monkeypatch: pytest.MonkeyPatch, policy: dict[str, Any]) -> None:
    # The two tests above, where the time left holds less than the first greedy
    # run's least (FIRST_LEAST_S 10 s) and its jobs on free GPUs alone would take
    # longer than the whole limit (10 s per job): neither the floor lane nor the early
    # lane with the per-node baselines starts before the first greedy plan (they
    # would not end in time, and a fork slows the run): the first greedy run goes
    # first, and the plain greedy plan is made in this process
    events = _spy_lanes(monkeypatch)
    monkeypatch.setattr(cpsat, "FIRST_LEAST_S", 10.0)
    monkeypatch.setattr(cpsat, "FREE_JOB_S", 10.0)
    plan(_budget_snap(policy), time_limit_s=0.5)
    assert events[0] == ("greedy",) and ("floor",) not in events
    # nor where the jobs on free GPUs alone fit the limit (0.3 s for the one job) but
    # a whole greedy run (FLOOR_RUN_TIMES = 2 times that, 0.6 s) does not
    events.clear()
    quick = cpsat.free_quick_s
    monkeypatch.setattr(cpsat, "free_quick_s", lambda _usable: 0.3)
    plan(_budget_snap(policy), time_limit_s=0.5)
    assert events[0] == ("greedy",) and ("floor",) not in events
    # and with the jobs on free GPUs alone within the limit, the lanes start first
    monkeypatch.setattr(cpsat, "free_quick_s", quick)
    events.clear()
    monkeypatch.setattr(cpsat, "FREE_JOB_S", 1e-9)
    plan(_budget_snap(policy), time_limit_s=0.5)
    assert events[0] == (("lane", ["k8s", "slurm", cpsat.PRIORITY_FIRST]) if policy
                         else ("floor",))


def test_an_early_lane_runs_its_first_candidate_whatever_the_time() -> None:
    # In-process (no fork), the cluster of the next test, with a budget already
    # past: the early lane has no pace yet (first_s None), so the Kubernetes-style
    # baseline runs (k on n1, j waits: 8 tier-2 GPUs); the priority-first variant
    # then has no time, nor has ejection
    from planner.core.problem import build_problem

    problem = build_problem(load_snapshot(_snap()))
    d, said, proof = portfolio.second_lane(problem, ["k8s", cpsat.PRIORITY_FIRST], None,
                                        Budget(-1.0))
    assert proof is None  # (not asked for)
    assert {j: [problem.nodes[ni].node.id for ni, _m in parts]
            for j, parts in d.placements.items()} == {"k": ["n1"]}
    assert said == "the second lane's plan (the Kubernetes-style baseline's), better, returned"


def test_the_second_lane_returns_a_baselines_plan_when_it_is_the_best() -> None:
    # In-process (no fork). Both nodes free; k (priority 20, any GPUs) and j
    # (priority 10, needs NVLink, which only n1 has). The Kubernetes-style baseline
    # takes k first, on n1, and j waits (8 GPUs). Then the priority-first greedy
    # variant does the same, and does not rank higher; its squeaky-wheel pass is
    # skipped for a plan that is not better. Ejection then moves k to n2 and admits
    # j: 16 tier-2 GPUs, priority value 240, "the Kubernetes-style baseline's" plan.
    from planner.core.problem import build_problem

    problem = build_problem(load_snapshot(_snap()))
    d, said, _proof = portfolio.second_lane(problem, ["k8s", cpsat.PRIORITY_FIRST], 0.001,
                                         Budget(30.0))
    assert {j: [problem.nodes[ni].node.id for ni, _m in parts]
            for j, parts in d.placements.items()} == {"j": ["n1"], "k": ["n2"]}
    assert said == ("the second lane's plan (the Kubernetes-style baseline's), better, "
                    "returned after 1 job(s) admitted by ejection moves")


@fork_only
def test_the_floor_lane_gives_the_plain_greedy_plan_from_the_child_or_itself() -> None:
    # _budget_snap({}): the plain greedy plan evicts t3 (8 GPUs of n1) for j. Made in
    # a forked child, or, when the child gives nothing (it was stopped before it
    # answered), in-process: the same plan either way
    from planner.core.problem import build_problem

    problem = build_problem(load_snapshot(_budget_snap({})))
    want = portfolio.plain_greedy(problem)
    assert want.victims == {"t3"} and set(want.placements) == {"j"}
    floor = portfolio.FloorLane()
    assert floor.start(problem)
    floor.wait_s = 30.0
    got = floor.run(problem, Budget(1.0))
    assert (got.victims, got.placements) == (want.victims, want.placements)
    assert floor.error == ""
    late = portfolio.FloorLane()
    assert late.start(problem)
    assert late.lane is not None
    late.lane.close()  # gone before it answers
    got = late.run(problem, Budget(1.0))
    assert (got.victims, got.placements) == (want.victims, want.placements)
    assert late.error.startswith(("died", "late"))


@fork_only
def test_the_floor_lane_proves_the_tier_items_bound_for_its_plan() -> None:
    # _evicting_snap(): the plain greedy plan puts a (tier 1, 8 GPUs) on n1 through
    # s3 and b (tier 2, 4 GPUs) on n0 through r3: every pending GPU of both tiers, so
    # the tier items' bound (the default policy exempts tier 1 under exempt_if all)
    # is reached on both without a solve (ALL). Started with a budget, the child sends
    # its plan, then that bound for it. Asked for no bound before its plan came, it
    # sends the plan alone
    problem = build_problem(load_snapshot(_evicting_snap()))
    floor = portfolio.FloorLane()
    assert floor.start(problem, Budget(30.0))
    floor.wait_s = 30.0
    d = floor.run(problem, Budget(30.0))
    assert d.victims == {"r3", "s3"}
    assert {j: [problem.nodes[ni].node.id for ni, _m in parts]
            for j, parts in d.placements.items()} == {"a": ["n1"], "b": ["n0"]}
    proof = floor.proof(Budget(30.0))
    assert proof is not None
    assert proof.items == [("tier-1 GPUs", 8.0, 8.0, "ALL"), ("tier-2 GPUs", 4.0, 4.0, "ALL")]
    quiet = portfolio.FloorLane()
    assert quiet.start(problem, Budget(30.0))
    quiet.no_proof()
    quiet.wait_s = 30.0
    assert quiet.run(problem, Budget(30.0)).victims == {"r3", "s3"}
    assert quiet.proof(Budget(30.0)) is None
    # started without a budget (no bound wanted), it gives its plan alone too
    plain = portfolio.FloorLane()
    assert plain.start(problem) and not plain.proving


def _floor_lane_alone(monkeypatch: pytest.MonkeyPatch, *, relaxation: bool = False) -> None:
    """With forced_lane: a floor lane (FLOOR_LANE_PAIRS 0) and no second lane; the
    whole relaxation expected to take too long unless ``relaxation``."""
    monkeypatch.setattr(cpsat, "FLOOR_LANE_PAIRS", 0)
    monkeypatch.setattr(portfolio.SecondLane, "start", lambda *_a: False)
    if not relaxation:
        monkeypatch.setattr(portfolio, "relaxation_s", lambda _p: 1e9)


@fork_only
@pytest.mark.usefixtures("forced_lane")
def test_where_the_floor_lane_runs_it_proves_the_tier_items_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A floor lane (FLOOR_LANE_PAIRS 0) and no second lane, the whole relaxation
    # expected to take too long: the floor lane's child proves the tier items' bound
    # for its plan after it, and no other child is forked for a bound (BoundLane). The
    # plan returned reaches it on both tiers: no gap, nothing proven after
    _floor_lane_alone(monkeypatch)

    def refuse(*_a: Any) -> bool:
        raise AssertionError("a bound lane forked")

    monkeypatch.setattr(portfolio.BoundLane, "start", refuse)
    p = plan(_evicting_snap(), time_limit_s=1.0)
    assert p.objective.admitted_gpus == {"1": 8, "2": 4, "3": 0}
    assert p.solver.status == "RELAXATION" and p.solver.gap is None
    assert ("bound from a relaxation solved with CP-SAT: the plan reaches the bound on "
            "tier-1 GPUs, tier-2 GPUs; nothing proven on the items after in ") \
        in (p.solver.detail or "")
    assert "s on the other core" in (p.solver.detail or "")


@fork_only
@pytest.mark.usefixtures("forced_lane")
def test_the_floor_lanes_bound_is_waited_for_after_the_assembly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As the test above, the floor lane's bound taken at the end of the strategies,
    # then as if it had not come by then (FloorLane.ready False): it is waited for
    # after the plan's assembly (_late_floor_proof), and the plan says the same (the
    # bound's sentence in its place, before nothing else) with the same status
    _floor_lane_alone(monkeypatch)
    monkeypatch.setattr(portfolio.BoundLane, "start", lambda *_a: False)
    early = plan(_evicting_snap(), time_limit_s=1.0)
    monkeypatch.setattr(portfolio.FloorLane, "ready", lambda _self: False)
    late = plan(_evicting_snap(), time_limit_s=1.0)
    for p in (early, late):
        assert p.objective.admitted_gpus == {"1": 8, "2": 4, "3": 0}
        assert p.solver.status == "RELAXATION" and p.status == "fallback"
        assert not verify(load_snapshot(_evicting_snap()), p)

    def said(p: Any) -> str:  # (the bound's time apart)
        return re.sub(r"in [0-9.]+ s on", "in _ s on", p.solver.detail or "")

    assert said(late) == said(early)
    assert said(late).endswith("the plan reaches the bound on tier-1 GPUs, tier-2 GPUs; "
                               "nothing proven on the items after in _ s on the other core")


@fork_only
@pytest.mark.usefixtures("forced_lane")
def test_where_the_whole_relaxation_fits_it_takes_the_floor_lanes_place(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As test_the_other_core_proves_a_bound_where_no_second_lane_runs, with a floor
    # lane: the whole relaxation's build fits, so the floor lane's child is told to
    # prove nothing and a bound lane proves the plan optimal on all five items
    _floor_lane_alone(monkeypatch, relaxation=True)
    p = plan(_evicting_snap(), time_limit_s=1.0)
    assert p.objective.admitted_gpus == {"1": 8, "2": 4, "3": 0}
    assert p.status == "optimal" and p.solver.status == "RELAXATION"
    assert p.solver.gap == 0.0 and p.solver.bound == 480.0
    assert "a relaxation solved with CP-SAT proves the plan optimal on 5 objective item(s)" \
        in (p.solver.detail or "")


def _evicting_snap() -> dict[str, Any]:
    """n0: tier-3 r3 on all 8 GPUs; n1: tier-3 s3 on 4 GPUs, 4 free; both 5 h old,
    restore_s 60 s (r3 costs 480 GPU-s, s3 240). Pending: a (tier 1, a whole node),
    b (tier 2, 4 GPUs). The optimum: a through r3, b on n1's free GPUs: 8/4 GPUs,
    priority 8 x 10 + 4 x 5 = 100, 480 GPU-s, one eviction (tests/test_bound.py
    works it out)."""
    nodes = [{"id": f"n{i}", "gpus": 8, "nvlink": "nvswitch"} for i in range(2)]

    def running(jid: str, gpus: int, node: str) -> dict[str, Any]:
        return {"id": jid, "tier": 3, "state": "running", "gpus_per_node": gpus,
                "started_at": "2026-11-30T03:00:00Z", "checkpoint": {"restore_s": 60},
                "placement": [{"node": node, "gpus": list(range(gpus))}]}

    return {"version": 1, "now": "2026-11-30T08:00:00Z", "storage": [], "nodes": nodes,
            "jobs": [running("r3", 8, "n0"), running("s3", 4, "n1"),
                     {"id": "a", "tier": 1, "state": "pending", "gpus_per_node": 8,
                      "priority": 10},
                     {"id": "b", "tier": 2, "state": "pending", "gpus_per_node": 4,
                      "priority": 5}],
            "policy": {}}


@fork_only
@pytest.mark.usefixtures("forced_lane")
def test_the_other_core_proves_a_bound_where_no_second_lane_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The whole model skipped and no second lane started: a child is forked for the
    # bound (BoundLane), and the relaxation proves the heuristics' plan optimal on
    # all five items
    monkeypatch.setattr(portfolio.SecondLane, "start", lambda *_a: False)
    p = plan(_evicting_snap(), time_limit_s=1.0)
    assert p.objective.admitted_gpus == {"1": 8, "2": 4, "3": 0}
    assert [e.job for e in p.evictions] == ["r3"]
    assert p.status == "optimal"
    assert p.solver.status == "RELAXATION"
    assert p.solver.gap == 0.0 and p.solver.bound == 480.0
    detail = p.solver.detail or ""
    assert "no time left to build and solve the model" in detail
    assert "a relaxation solved with CP-SAT proves the plan optimal on 5 objective item(s)" \
        in detail and "on the other core" in detail


@fork_only
@pytest.mark.usefixtures("forced_lane")
def test_the_other_core_proves_the_tier_items_bound_where_the_relaxation_would_not_fit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # no second lane, and the whole relaxation's build expected to take too long:
    # the child proves the tier items' bound alone (bound.prove_tiers), which the
    # plan reaches on both tiers without a solve: no gap, nothing proven after
    monkeypatch.setattr(portfolio.SecondLane, "start", lambda *_a: False)
    monkeypatch.setattr(portfolio, "relaxation_s", lambda _p: 1e9)
    p = plan(_evicting_snap(), time_limit_s=1.0)
    assert p.objective.admitted_gpus == {"1": 8, "2": 4, "3": 0}
    assert p.solver.status == "RELAXATION" and p.solver.gap is None
    assert p.status == "fallback"
    assert "the plan reaches the bound on tier-1 GPUs, tier-2 GPUs; nothing proven on " \
        "the items after" in (p.solver.detail or "")


def test_no_bound_lane_where_its_time_has_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    # a budget already past (a plan whose problem took the whole limit): no child,
    # and not even the estimates of the relaxation's and the tier items' build
    def estimate(_p: Any) -> float:
        raise AssertionError("estimated")

    monkeypatch.setattr(portfolio, "relaxation_s", estimate)
    monkeypatch.setattr(portfolio, "tiers_s", estimate)
    monkeypatch.setattr(portfolio, "Lane", estimate)
    problem = build_problem(load_snapshot(_evicting_snap()))
    lane = portfolio.BoundLane(Decision())
    assert not lane.start(problem, Budget(0.0)) and lane.lane is None


@pytest.mark.usefixtures("forced_lane")
def test_no_bound_within_the_tick_with_one_worker() -> None:
    # one worker: no other core
    p = plan(_evicting_snap(), time_limit_s=1.0, workers=1)
    assert p.solver.status == "SKIPPED" and p.solver.gap is None
    assert p.status == "fallback"


@fork_only
@pytest.mark.usefixtures("forced_lane")
def test_the_second_lane_proves_the_tier_items_bound() -> None:
    # a second lane runs on the other core (no BoundLane): it proves the tier items'
    # bound (bound.prove_tiers; the default policy exempts tier 1 under exempt_if
    # all). Every job of both tiers admitted reaches it without a solve: nothing is
    # proven on the priority value and the cost, so no gap, the status as it was
    p = plan(_evicting_snap(), time_limit_s=1.0)
    assert p.objective.admitted_gpus == {"1": 8, "2": 4, "3": 0}
    assert p.solver.status == "RELAXATION" and p.solver.gap is None
    assert p.status == "fallback"
    assert ("bound from a relaxation solved with CP-SAT: the plan reaches the bound on "
            "tier-1 GPUs, tier-2 GPUs; nothing proven on the items after in ") \
        in (p.solver.detail or "")
    assert "s on the other core" in (p.solver.detail or "")


def test_the_second_lane_proves_the_tier_items_bound_for_its_plan() -> None:
    # In-process (no fork): with ``bound``, the lane's plan (a and b placed) comes
    # with the tier items' bound, both tiers reached without a solve
    from planner.core.problem import build_problem

    problem = build_problem(load_snapshot(_evicting_snap()))
    d, _said, proof = portfolio.second_lane(problem, [cpsat.PRIORITY_FIRST], 0.001,
                                            Budget(30.0), bound=True)
    assert sorted(d.placements) == ["a", "b"]
    assert proof is not None and proof.gap is None
    assert proof.items == [("tier-1 GPUs", 8.0, 8.0, "ALL"), ("tier-2 GPUs", 4.0, 4.0, "ALL")]


@pytest.mark.parametrize("hint_ranks_first", [False, True])
def test_a_lane_with_a_hint_proves_the_tier_bound_after_its_first_candidate(
        monkeypatch: pytest.MonkeyPatch, hint_ranks_first: bool) -> None:
    # In-process (no fork), _evicting_snap. A lane whose baselines come first is given
    # the first lane's plan as a hint: the tier items' bound is proved after its first
    # candidate, before the priority-first variant, for the better of the two plans.
    # The Kubernetes-style baseline (stubbed) places b alone, on n1's free GPUs. The
    # hint: the plain greedy plan (a through r3, b: the optimum), which ranks first,
    # or an empty plan, which does not. The bound after the ejection moves is proved
    # again for the lane's plan (the optimum: ejection admits a) and kept where it
    # reaches as many items: tiers 1 and 2 reached without a solve
    problem = build_problem(load_snapshot(_evicting_snap()))
    events: list[tuple] = []
    prove = portfolio.prove_tiers

    def spy_prove(p: Any, d: Decision, budget: Budget, **kw: Any) -> Any:
        events.append(("prove", sorted(d.placements)))
        return prove(p, d, budget, **kw)

    cand = portfolio.candidate

    def spy_candidate(kw: Any) -> Any:
        events.append(("candidate", kw))
        return cand(kw)

    n1 = problem.node_index["n1"]
    only_b = Decision(set(), {"b": [(n1, 0xF0)]})
    monkeypatch.setattr(portfolio, "prove_tiers", spy_prove)
    monkeypatch.setattr(portfolio, "candidate", spy_candidate)
    monkeypatch.setattr(portfolio.Baseline, "run", lambda self, _p, _b: only_b)
    hint = portfolio.plain_greedy(problem) if hint_ranks_first else Decision()
    d, _said, proof = portfolio.second_lane(problem, ["k8s", cpsat.PRIORITY_FIRST], 0.001,
                                            Budget(30.0), bound=True, hint=hint)
    assert sorted(d.placements) == ["a", "b"]
    assert events[:3] == [("candidate", "k8s"),
                          ("prove", ["a", "b"] if hint_ranks_first else ["b"]),
                          ("candidate", cpsat.PRIORITY_FIRST)]
    assert events[3:] == [("prove", ["a", "b"])]  # (again at the end)
    assert proof is not None
    assert proof.items == [("tier-1 GPUs", 8.0, 8.0, "ALL"), ("tier-2 GPUs", 4.0, 4.0, "ALL")]


def test_the_second_lanes_ejection_leaves_the_tier_bound_its_time_and_a_margin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # tier items' bound expected to take 2 s of a 30 s lane: the ejection moves stop
    # TIERS_KEEP_TIMES (1.5) x 2 = 3 s before the lane's end, and the last polishing
    # pass's share before that (CHEAPER_TIMES x the first pass's time, a few ms here)
    problem = build_problem(load_snapshot(_evicting_snap()))
    monkeypatch.setattr(portfolio, "tiers_s", lambda _p: 2.0)
    ends: list[float] = []
    run = portfolio.Eject.run

    def spy(self: Any, p: Any, budget: Budget) -> Any:
        ends.append(budget.end)
        return run(self, p, budget)

    monkeypatch.setattr(portfolio.Eject, "run", spy)
    budget = Budget(30.0)
    portfolio.second_lane(problem, [cpsat.PRIORITY_FIRST], 0.001, budget, bound=True)
    assert portfolio.TIERS_KEEP_TIMES == 1.5
    assert budget.end - 3.5 < ends[0] <= budget.end - 3.0


@fork_only
@pytest.mark.usefixtures("forced_lane")
def test_the_second_lanes_tier_bound_gives_the_plan_a_gap() -> None:
    # _evicting_snap's nodes and victims (r3 on n0's 8 GPUs, s3 on 4 of n1's, 4 free),
    # two tier-2 jobs of 8 GPUs pending, and a window with one eviction left for jobs
    # of tiers that are not exempt. One of them starts through one victim (s3, the
    # cheaper: with n1's free GPUs); the other would need a second: 8 tier-2 GPUs.
    # The bound: where the window binds every victim, n1's 4 free GPUs and the
    # biggest victim's 8, 12; where no victim is for tier 2, 8-GPU jobs on 4 free GPUs,
    # none. The gap: (12 - 8) / 12
    snap = _evicting_snap()
    snap["jobs"] = snap["jobs"][:2] + [
        {"id": j, "tier": 2, "state": "pending", "gpus_per_node": 8, "priority": 5}
        for j in ("b", "c")]
    snap["policy"] = {"thrash": {"min_evictions": 1, "max_fraction": 0.0,
                                 "max_gpu_fraction": None}}
    p = plan(snap, time_limit_s=1.0)
    assert p.objective.admitted_gpus == {"1": 0, "2": 8, "3": 0}
    assert [e.job for e in p.evictions] == ["s3"]
    assert p.solver.status == "RELAXATION" and p.status == "feasible"
    assert p.solver.gap == pytest.approx(1 / 3)
    assert "tier-2 GPUs 8 against at most 12" in (p.solver.detail or "")


@fork_only
@pytest.mark.usefixtures("forced_lane")
def test_a_failed_bound_leaves_the_plan_without_a_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: Any) -> None:
        raise RuntimeError("no luck")

    monkeypatch.setattr(portfolio.SecondLane, "start", lambda *_a: False)
    monkeypatch.setattr(portfolio, "_prove_through", broken)
    p = plan(_evicting_snap(), time_limit_s=1.0)
    # the heuristics' plan, as without the bound
    assert p.objective.admitted_gpus == {"1": 8, "2": 4, "3": 0}
    assert p.solver.status == "SKIPPED" and p.solver.gap is None and p.status == "fallback"
