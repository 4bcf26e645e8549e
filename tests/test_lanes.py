"""The second lane (planner/lanes.py): Python work in a forked child process.

The mechanics first (a result, a failure, a late child, a dead child, when lanes
are allowed), then the planner's use of it: on a cluster where the whole model is
skipped, the child's plan is returned when it is better, the parent's otherwise,
and never with ``workers=1`` or in deterministic mode.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from models import load_snapshot
from planner import cpsat, lanes, plan
from planner.lanes import Lane
from planner.verify import verify

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


@fork_only
def test_a_lane_returns_what_the_child_computed() -> None:
    lane = Lane(_pid_and_sum, [1, 2, 3, 4])
    pid, total = lane.result(time.perf_counter() + 30)
    assert total == 10
    assert pid != os.getpid()  # computed in another process
    assert lane.error is None


@fork_only
def test_a_failing_child_gives_none_and_says_why() -> None:
    lane = Lane(_boom)
    assert lane.result(time.perf_counter() + 30) is None
    assert lane.error == "failed (ValueError: boom)"


@fork_only
def test_a_late_child_is_killed() -> None:
    lane = Lane(_sleep)
    assert lane.result(time.perf_counter() + 0.05) is None
    assert lane.error == "late"
    assert not lane._proc.is_alive()


@fork_only
def test_a_child_that_dies_gives_none() -> None:
    lane = Lane(_die)
    assert lane.result(time.perf_counter() + 30) is None
    assert lane.error == "died (EOFError)"


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
    monkeypatch.setattr(cpsat, "FULL_SOLVE_EXACT_PER_PAIR_S", 1e3)  # the model never fits
    parent, eject, squeaky = os.getpid(), cpsat.eject, cpsat.squeaky_wheel
    monkeypatch.setattr(cpsat, "eject", lambda problem, d, **kw:
                        (d, 0) if os.getpid() == parent else eject(problem, d, **kw))
    monkeypatch.setattr(cpsat, "squeaky_wheel", lambda problem, d, **kw:
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
    assert p.solver.detail.endswith(
        "; the second lane's greedy plan (a second pass, deferred jobs first), better, returned")
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

    monkeypatch.setattr(cpsat, "_second_lane", broken)
    p = plan(_snap(), time_limit_s=0.5)
    assert _admitted(p) == 8
    assert "the second lane gave no plan (failed (RuntimeError: no luck))" in p.solver.detail


@pytest.mark.usefixtures("forced_lane")
def test_deterministic_mode_never_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("no second lane in deterministic mode")

    monkeypatch.setattr(cpsat, "Lane", refuse)
    p = plan(_snap(), time_limit_s=0.5, deterministic=True)
    assert "second lane" not in p.solver.detail
