"""Jobs alike for the objective start in the queue order (planner/core/decision.py,
``first_come``).

Conventions of test_planner_cases.py: Monday 2026-11-30 08:00Z, 8-GPU NVSwitch
nodes, checkpoints of size 0 with a signal; running jobs started at 04:00.
"""

from __future__ import annotations

from test_planner_cases import NOW, OLD, node, pend, run, snap, solve

from models import load_snapshot
from planner.core.decision import Decision, first_come
from planner.core.problem import Problem, build_problem


def _problem(jobs: list[dict]) -> Problem:
    return build_problem(load_snapshot(snap([node("n0"), node("n1")], jobs)))


def test_a_placed_job_hands_its_gpus_to_a_twin_earlier_in_the_queue() -> None:
    # n0: r0 (tier 3) on GPUs 0-6, GPU 7 free; n1 free. Pending: a1, a2, a3 (tier 2,
    # priority 5, 1 GPU, submitted at 04:00: past their patience), c (tier 2,
    # priority 6, 1 GPU). A plan that places a2 and a3 (on n0 GPU 7 and n1 GPU 0)
    # and c (n1 GPU 1) leaves a1 waiting, which is first of the three in the queue
    # order (submitted together: by id): a1 takes the place of a3, the last placed; a2 keeps its own; c is
    # of another priority and keeps its place. Same objective: the same GPUs, tier and
    # priority.
    jobs = [run("r0", 3, {"n0": [0, 1, 2, 3, 4, 5, 6]}),
            *(pend(f"a{i}", 2, 1, priority=5, submitted_at=OLD) for i in (1, 2, 3)),
            pend("c", 2, 1, priority=6, submitted_at=OLD)]
    problem = _problem(jobs)
    d = Decision(set(), {"a2": [(0, 1 << 7)], "a3": [(1, 1 << 0)], "c": [(1, 1 << 1)]})
    out, moved = first_come(problem, d)
    assert moved == 1
    assert out.placements == {"a2": [(0, 1 << 7)], "a1": [(1, 1 << 0)], "c": [(1, 1 << 1)]}
    assert first_come(problem, out) == (out, 0)  # already in the queue order


def test_the_queue_order_is_by_submission_then_id() -> None:
    # n0 and n1 free. Pending tier-2 1-GPU jobs of priority 5: "y" submitted at
    # 05:00, "z" at 04:30, "x" at 06:00, and "w" without submitted_at (first, as
    # R16 reads a job without a queue start). A plan that places x and y hands
    # their GPUs to w and z, the first two in the queue order; ids alone would have
    # kept x.
    jobs = [pend("y", 2, 1, priority=5, submitted_at="2026-11-30T05:00:00Z"),
            pend("z", 2, 1, priority=5, submitted_at="2026-11-30T04:30:00Z"),
            pend("x", 2, 1, priority=5, submitted_at="2026-11-30T06:00:00Z"),
            pend("w", 2, 1, priority=5)]
    d = Decision(set(), {"x": [(0, 1 << 0)], "y": [(1, 1 << 0)]})
    out, moved = first_come(_problem(jobs), d)
    assert moved == 2
    assert out.placements == {"w": [(0, 1 << 0)], "z": [(1, 1 << 0)]}


def test_a_job_put_back_by_a_preemption_keeps_its_place_by_first_submission() -> None:
    # n0: r0 (tier 3) on GPUs 0-6, GPU 7 free. Pending tier-2 1-GPU jobs of priority
    # 5: p, submitted at 04:00 and preempted once at 06:00 (its R16 queue start;
    # one preemption: no R9 hold, and past the cascade guard), and s, submitted at
    # 05:00. A plan that places s hands GPU 7 to p: the queue order is by first
    # submission (04:00 before 05:00), not by the queue start (06:00 after 05:00).
    jobs = [run("r0", 3, {"n0": [0, 1, 2, 3, 4, 5, 6]}),
            pend("p", 2, 1, priority=5, submitted_at=OLD, preemptions=1,
                 last_preempted_at="2026-11-30T06:00:00Z"),
            pend("s", 2, 1, priority=5, submitted_at="2026-11-30T05:00:00Z")]
    problem = _problem(jobs)
    assert problem.pending["p"].job.queue_start() > problem.pending["s"].job.queue_start()
    assert problem.pending["p"].held_until is None
    out, moved = first_come(problem, Decision(set(), {"s": [(0, 1 << 7)]}))
    assert (moved, out.placements) == (1, {"p": [(0, 1 << 7)]})


def test_a_twin_takes_a_victims_gpus_only_with_the_rights_to_them() -> None:
    # n0: r0 (tier 3) on all 8 GPUs, n1 full with r1 (tier 3). Plan: b2 (tier 2, 8
    # GPUs, past its patience) evicts r0. b1 (the same kind, earlier in id order)
    # was submitted at 07:58: within tier 2's 600 s of patience, R16 keeps it to
    # free GPUs, so it may not take r0's GPUs: nothing moves. Past its patience it
    # takes b2's place, victim and all.
    jobs = [run("r0", 3, {"n0": list(range(8))}), run("r1", 3, {"n1": list(range(8))}),
            pend("b1", 2, 8, priority=5, submitted_at="2026-11-30T07:58:00Z"),
            pend("b2", 2, 8, priority=5, submitted_at=OLD)]
    d = Decision({"r0"}, {"b2": [(0, 0xFF)]})
    assert first_come(_problem(jobs), d) == (d, 0)
    jobs[2] = pend("b1", 2, 8, priority=5, submitted_at=OLD)
    out, moved = first_come(_problem(jobs), d)
    assert (moved, out.victims, out.placements) == (1, {"r0"}, {"b1": [(0, 0xFF)]})


def test_the_planners_start_the_first_of_equal_jobs() -> None:
    # n0 has 3 free GPUs (r0 on 0-4, within tier 3's 30 min of immunity: no victim);
    # n1 is held by r1, immune too. Five tier-2 1-GPU jobs of priority 5, q1..q5:
    # three start, and they are q1, q2 and q3 for every planner.
    jobs = [run("r0", 3, {"n0": [0, 1, 2, 3, 4]}, started="2026-11-30T07:50:00Z"),
            run("r1", 3, {"n1": list(range(8))}, started="2026-11-30T07:50:00Z"),
            *(pend(f"q{i}", 2, 1, priority=5, submitted_at=OLD) for i in range(1, 6))]
    data = snap([node("n0"), node("n1")], jobs)
    assert data["now"] == NOW
    for planner in ("cpsat", "greedy"):
        p = solve(data, planner)
        assert sorted(x["job"] for x in p["placements"]) == ["q1", "q2", "q3"], planner
        assert p["evictions"] == []
