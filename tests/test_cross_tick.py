"""The cross-tick rules of contract section 9, on hand-worked stories.

R15 (rolling eviction budget), R16 (patience) and R17 (ending soon), planned by
CP-SAT (deterministic), the greedy planner and the Kubernetes- and Slurm-style
baselines, every plan verified; and the verifier rejecting plans that break
them, naming the rule.

Conventions (as in test_planner_cases.py): Monday 2026-11-30 08:00Z, 8-GPU
NVSwitch nodes, no storage, checkpoints of size 0 with a signal, so a victim's
cost is ``8 x restore_s`` and its grace 60 s. Node ``n{i}`` is held by tier-3
job ``r{i}`` (started 04:00, past its 30 min immunity) with restore
``100 x (i + 1)`` s: evicting ``r{i}`` costs ``800 x (i + 1)`` GPU-s.
Pending jobs were submitted at 04:00 (past tier 2's 600 s of patience) unless a
story says otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_planner_cases import ALL8, NOW, OLD, node, pend, run, snap, solve

from models import load_snapshot
from planner import plan
from planner.checks.verify import verify

PLANNERS = ("cpsat", "greedy", "k8s", "slurm")


def holders(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [{"id": f"n{i}", "gpus": 8} for i in range(n)]
    jobs = [run(f"r{i}", 3, {f"n{i}": ALL8}, restore=100.0 * (i + 1)) for i in range(n)]
    return nodes, jobs


def evicted(p: dict[str, Any]) -> list[str]:
    return sorted(e["job"] for e in p["evictions"])


def reasons(p: dict[str, Any]) -> dict[str, str]:
    return {d["job"]: d["reason"] for d in p["deferred"]}


def rules_broken(data: dict[str, Any], p: Any) -> set[str]:
    return {v.rule for v in verify(load_snapshot(data), p)}


# ---------------------------------------------------------------- R15


@pytest.mark.parametrize("planner", PLANNERS)
def test_the_rolling_budget_counts_the_evictions_already_in_the_window(planner: str) -> None:
    # 6 running jobs: B = max(min_evictions 4, floor(0.05 x 6) = 0) = 4. The window is
    # [07:00, 08:00): the evictions at 07:00 (its first instant), 07:30 and 07:50
    # count, the one at 06:59:59 does not: H = 3, so this plan may evict 4 - 3 = 1
    # job for the six tier-2 jobs of 8 GPUs (priorities 1..6), none exempt. The most
    # important one (p6, 8 x 6 = 48 priority value; the GPU budget, max(16, floor(0.015
    # x 48)) = 16, has 16 - 4 - 4 = 8 left) takes n0 from its cheapest
    # holder r0 (800 GPU-s); the others wait for the window: THRASH_BUDGET, until
    # the oldest counted eviction leaves it at 07:00 + 1 h = 08:00:00 (now: it leaves
    # it at the next tick).
    nodes, jobs = holders(6)
    jobs += [pend(f"p{k}", 2, 8, priority=k, submitted_at=OLD) for k in range(1, 7)]
    data = snap(nodes, jobs)
    data["recent_evictions"] = [
        {"job": "gone-1", "at": "2026-11-30T07:00:00Z", "gpus": 4},
        {"job": "gone-2", "at": "2026-11-30T07:30:00Z"},
        {"job": "r5", "at": "2026-11-30T07:50:00Z", "gpus": 4},  # (need not be gone)
        {"job": "old", "at": "2026-11-30T06:59:59Z", "gpus": 8}]
    p = solve(data, planner)
    assert len(p["evictions"]) == 1
    assert reasons(p) == {f"p{k}": "THRASH_BUDGET" for k in range(1, 7)
                          if k != int(p["placements"][0]["job"][1:])}
    if planner in ("cpsat", "greedy"):
        assert evicted(p) == ["r0"] and [q["job"] for q in p["placements"]] == ["p6"]
        assert p["objective"]["priority_value"] == 48
        assert p["objective"]["eviction_cost_gpu_s"] == 800
    d = next(d for d in p["deferred"] if d["job"] == "p1")
    assert d["until"] == "2026-11-30T08:00:00Z"
    assert ("rolling budget of 4 per 60 min (3 already in the window; the oldest of them "
            "leaves the window at 2026-11-30T08:00:00Z, 1 in this plan) leaves 0 (R15)"
            in d["detail"])


@pytest.mark.parametrize("planner", PLANNERS)
def test_an_exempt_tier1_gang_uses_up_the_budget_of_a_tier2_job(planner: str) -> None:
    # B = 4 (6 running jobs), H = 0. The tier-1 gang g (4 nodes x 8 GPUs) is exempt
    # and needs 4 victims: the four cheapest holders r0-r3 (800 + 1,600 + 2,400 +
    # 3,200 = 8,000 GPU-s). With E = 4 exempt victims the plan may have
    # max(0, 4 - 0 - 4) = 0 others, so the tier-2 job t (8 GPUs), which would need a
    # fifth victim, waits: THRASH_BUDGET, with no eviction in the window to leave it
    # (until null). Without the gang, t takes n0 (checked last).
    nodes, jobs = holders(6)
    gang = pend("g", 1, 8, nodes=4, submitted_at=OLD)
    t = pend("t", 2, 8, submitted_at=OLD)
    p = solve(snap(nodes, jobs + [gang, t]), planner)
    assert evicted(p) == ["r0", "r1", "r2", "r3"]
    assert reasons(p) == {"t": "THRASH_BUDGET"}
    d = p["deferred"][0]
    assert d["until"] is None
    assert "the rolling budget of 4 per 60 min (0 already in the window, 4 in this plan) " \
           "leaves 0 (R15)" in d["detail"]
    assert p["objective"]["admitted_gpus"] == {"1": 32, "2": 0, "3": 0}
    alone = solve(snap(nodes, jobs + [t]), planner)
    assert evicted(alone) == ["r0"] and reasons(alone) == {}


@pytest.mark.parametrize("planner", PLANNERS)
def test_exempt_evictions_are_never_refused_even_with_the_window_full(planner: str) -> None:
    # The story above with 5 evictions already in the window (H = 5 > B = 4): the
    # exempt gang still evicts its 4 victims (a plan whose victims are all exempt
    # always satisfies R15), and t waits.
    nodes, jobs = holders(6)
    data = snap(nodes, jobs + [pend("g", 1, 8, nodes=4, submitted_at=OLD),
                               pend("t", 2, 8, submitted_at=OLD)])
    data["recent_evictions"] = [{"job": f"x{k}", "at": f"2026-11-30T07:{10 + k}:00Z"}
                                for k in range(5)]
    p = solve(data, planner)
    assert evicted(p) == ["r0", "r1", "r2", "r3"]
    assert reasons(p) == {"t": "THRASH_BUDGET"}
    assert p["deferred"][0]["until"] == "2026-11-30T08:10:00Z"


@pytest.mark.parametrize("planner", PLANNERS)
def test_an_exempt_job_does_not_carry_other_tiers_past_the_budget(planner: str) -> None:
    # Two running jobs: B = 4, and 4 evictions in the window leave 0. Tier-1 job a
    # (1 GPU) and tier-2 job b (7 GPUs) are pending; nothing is free. a evicts the
    # cheapest holder r0 (800 GPU-s), exempt. With the default exempt_if "all" the 7
    # GPUs a leaves on n0 are not b's: had b taken them, r0 would have a tier-2
    # preemptor and count against the empty window, so b waits (THRASH_BUDGET) and
    # takes them as free GPUs at a later tick. With the contract's reading ("any")
    # one tier-1 preemptor exempts r0 whoever else uses it: a and b share n0.
    nodes, jobs = holders(2)
    data = snap(nodes, jobs + [pend("a", 1, 1, submitted_at=OLD),
                               pend("b", 2, 7, submitted_at=OLD)])
    data["recent_evictions"] = [{"job": f"x{k}", "at": f"2026-11-30T07:{10 + k}:00Z"}
                                for k in range(4)]
    p = solve(data, planner)
    assert evicted(p) == ["r0"]
    assert p["evictions"][0]["preemptors"] == ["a"]
    assert reasons(p) == {"b": "THRASH_BUDGET"}
    assert p["objective"]["admitted_gpus"] == {"1": 1, "2": 0, "3": 0}
    data["policy"] = {"thrash": {"exempt_if": "any"}}
    p = solve(data, planner)
    assert evicted(p) == ["r0"]
    assert p["evictions"][0]["preemptors"] == ["a", "b"]
    assert p["objective"]["admitted_gpus"] == {"1": 1, "2": 7, "3": 0}


def test_the_verifier_counts_a_shared_victim_as_exempt_only_as_exempt_if_says() -> None:
    # The "any" plan of the story above (r0 taken by a and b) checked under "all":
    # r0 is not exempt, so 1 eviction exceeds the 0 the window leaves: R15.
    nodes, jobs = holders(2)
    data = snap(nodes, jobs + [pend("a", 1, 1, submitted_at=OLD),
                               pend("b", 2, 7, submitted_at=OLD)],
                policy={"thrash": {"exempt_if": "any"}})
    data["recent_evictions"] = [{"job": f"x{k}", "at": f"2026-11-30T07:{10 + k}:00Z"}
                                for k in range(4)]
    p = plan(data, planner="cpsat", deterministic=True, time_limit_s=5.0)
    assert rules_broken(data, p) == set()
    data["policy"] = {}
    broken = [v for v in verify(load_snapshot(data), p) if v.rule == "R15"]
    assert len(broken) == 1
    assert "1 evictions not exempt (not every preemptor of a tier in exempt_tiers=[1])" \
        in str(broken[0])


def test_the_budget_grows_with_the_running_jobs_and_can_be_switched_off() -> None:
    # 100 one-GPU tier-3 jobs on 13 nodes (12 full, 4 on the 13th): with max_fraction
    # 0.05, B = max(4, floor(0.05 x 100)) = 5. Ten pending one-GPU tier-2 jobs need one
    # victim each; with no free GPU only 5 are placed. With "thrash": null, all 10;
    # with the default 0.03, B = max(4, 3) = 4.
    nodes = [{"id": f"n{i:02d}", "gpus": 8} for i in range(13)]
    jobs = [run(f"r{k:03d}", 3, {f"n{k // 8:02d}": [k % 8]}) for k in range(100)]
    nodes[12]["gpus"] = 4
    jobs += [pend(f"p{k}", 2, 1, submitted_at=OLD) for k in range(10)]
    five = {"thrash": {"max_fraction": 0.05}}
    p = solve(snap(nodes, jobs, policy=five))
    assert len(p["evictions"]) == 5 and len(p["placements"]) == 5
    assert set(reasons(p).values()) == {"THRASH_BUDGET"}
    off = solve(snap(nodes, jobs, policy={"thrash": None}))
    assert len(off["evictions"]) == 10 and reasons(off) == {}
    loose = solve(snap(nodes, jobs, policy={"thrash": {"max_fraction": 0.08}}))
    assert len(loose["evictions"]) == 8  # floor(0.08 x 100) = 8
    assert len(solve(snap(nodes, jobs))["evictions"]) == 4
    # a tier-1 job of 4 GPUs evicts 4 exempt victims: max(0, 5 - 0 - 4) = 1 tier-2 job
    # is left; four tier-1 jobs of 2 GPUs evict 8 > 5, all exempt, and no tier-2 job
    for planner in PLANNERS:
        one = solve(snap(nodes, jobs + [pend("big", 1, 4, submitted_at=OLD)], five), planner)
        assert one["objective"]["admitted_gpus"] == {"1": 4, "2": 1, "3": 0}, planner
        four = solve(snap(nodes, jobs + [pend(f"b{k}", 1, 2, submitted_at=OLD)
                                         for k in range(4)], five), planner)
        assert four["objective"]["admitted_gpus"] == {"1": 8, "2": 0, "3": 0}, planner
        assert len(four["evictions"]) == 8


# ---------------------------------------------------------------- R16


@pytest.mark.parametrize("planner", PLANNERS)
def test_patience_a_job_queued_too_briefly_takes_only_free_gpus(planner: str) -> None:
    # Tier 2 waits preempt_after_s = 600 s before it may evict. n0 is held by r0; n1
    # has 4 free GPUs (r1 holds 0-3). At 08:00:
    # - young (8 GPUs, submitted 07:55, queued 300 s < 600 s) needs an eviction: it
    #   waits, PATIENCE, until 07:55 + 600 s = 08:05;
    # - small (4 GPUs, submitted 07:55) fits on n1's free GPUs: placed, no eviction;
    # - ripe (8 GPUs, submitted 07:50:00, queued exactly 600 s: R16 allows it) evicts
    #   r0 (800 GPU-s; evicting r1 instead, 4 x 300 = 1,200 GPU-s, would also leave
    #   small no free GPUs);
    # - requeued (8 GPUs, submitted 04:00 but preempted at 07:58, no cooldown): its
    #   queue start is the later time, 07:58, so it waits until 08:08.
    nodes = [{"id": "n0", "gpus": 8}, {"id": "n1", "gpus": 8}, {"id": "n2", "gpus": 8}]
    jobs = [run("r0", 3, {"n0": ALL8}, restore=100.0),
            run("r1", 3, {"n1": [0, 1, 2, 3]}, restore=300.0),
            run("r2", 3, {"n2": ALL8}, restore=900.0),
            pend("young", 2, 8, submitted_at="2026-11-30T07:55:00Z", priority=9),
            pend("small", 2, 4, submitted_at="2026-11-30T07:55:00Z", priority=5),
            pend("ripe", 2, 8, submitted_at="2026-11-30T07:50:00Z", priority=1),
            pend("requeued", 2, 8, submitted_at=OLD, preemptions=1,
                 last_preempted_at="2026-11-30T07:58:00Z", priority=9)]
    policy = {"backoff": {"cooldown_s": 0}}
    p = solve(snap(nodes, jobs, policy), planner)
    assert evicted(p) == ["r0"]
    placed = {q["job"]: {part["node"] for part in q["placement"]} for q in p["placements"]}
    assert placed == {"small": {"n1"}, "ripe": {"n0"}}
    assert reasons(p) == {"young": "PATIENCE", "requeued": "PATIENCE"}
    until = {d["job"]: d["until"] for d in p["deferred"]}
    assert until == {"young": "2026-11-30T08:05:00Z", "requeued": "2026-11-30T08:08:00Z"}
    young = next(d for d in p["deferred"] if d["job"] == "young")
    assert "queued for 300 s" in young["detail"] or "queued for 5 min" in young["detail"] and "(R16)" in young["detail"]


def test_patience_of_zero_or_an_unknown_queue_start_does_not_hold_a_job() -> None:
    # The same young job with tier 2's preempt_after_s set to 0, or without
    # submitted_at (queue start unknown: it counts as having waited), evicts r0.
    nodes = [{"id": "n0", "gpus": 8}]
    young = pend("young", 2, 8, submitted_at="2026-11-30T07:55:00Z")
    for policy, job in (({"tiers": {"2": {"preempt_after_s": 0}}}, young),
                        ({}, pend("young", 2, 8))):
        p = solve(snap(nodes, [run("r0", 3, {"n0": ALL8}), job], policy))
        assert evicted(p) == ["r0"]


# ---------------------------------------------------------------- R17


@pytest.mark.parametrize("planner", PLANNERS)
def test_a_victim_that_ends_soon_is_spared(planner: str) -> None:
    # r0 (cheapest, 800 GPU-s) is expected to end at 08:05, within
    # spare_ending_within_s = 600 s: spared. r1 (1,600 GPU-s) ends at 08:20, beyond
    # it; r2 (2,400 GPU-s) ends at 07:59, already past its limit: not spared.
    # The tier-2 job t takes n1 from r1, the cheapest evictable victim.
    nodes, jobs = holders(3)
    jobs[0]["expected_end_at"] = "2026-11-30T08:05:00Z"
    jobs[1]["expected_end_at"] = "2026-11-30T08:20:00Z"
    jobs[2]["expected_end_at"] = "2026-11-30T07:59:00Z"
    p = solve(snap(nodes, jobs + [pend("t", 2, 8, submitted_at=OLD)]), planner)
    assert evicted(p) == ["r1"]
    assert p["objective"]["eviction_cost_gpu_s"] == 1600


def test_a_job_waiting_only_for_jobs_that_end_soon_says_until_when() -> None:
    # Both holders end within 600 s (r0 at 08:10:00, exactly 600 s: inclusive; r1 at
    # 08:04): t waits, ENDING_SOON, until the earliest of them, 08:04 (n1).
    nodes, jobs = holders(2)
    jobs[0]["expected_end_at"] = "2026-11-30T08:10:00Z"
    jobs[1]["expected_end_at"] = "2026-11-30T08:04:00Z"
    p = solve(snap(nodes, jobs + [pend("t", 2, 8, submitted_at=OLD)]))
    assert evicted(p) == [] and reasons(p) == {"t": "ENDING_SOON"}
    assert p["deferred"][0]["until"] == "2026-11-30T08:04:00Z"
    assert "n1" in p["deferred"][0]["detail"] and "r1" in p["deferred"][0]["detail"]
    off = solve(snap(nodes, jobs + [pend("t", 2, 8, submitted_at=OLD)],
                     policy={"spare_ending_within_s": 0}))
    assert evicted(off) == ["r0"]


# ---------------------------------------------------------------- the verifier


def test_the_verifier_rejects_plans_that_break_r15_r16_or_r17() -> None:
    # Each plan is made with the rule switched off, then checked against the
    # snapshot with the rule on.
    nodes, jobs = holders(6)
    burst = jobs + [pend(f"p{k}", 2, 8, submitted_at=OLD) for k in range(6)]
    data = snap(nodes, burst)  # B = 4: six evictions break R15
    free = plan(snap(nodes, burst, policy={"thrash": None}), deterministic=True)
    assert len(free.evictions) == 6
    assert rules_broken(data, free) == {"R15"}
    msg = " | ".join(str(v) for v in verify(load_snapshot(data), free))
    assert "6 evictions not exempt" in msg and "leave 4" in msg
    # and the GPU budget: 6 x 8 = 48 GPUs over max(16, floor(0.015 x 48)) = 16
    assert ("free 48 GPUs, over the rolling GPU budget: 16 (max(min_gpus=16, "
            "floor(0.015 x 48 GPUs on up/drain nodes)))") in msg

    young = jobs[:1] + [pend("young", 2, 8, submitted_at="2026-11-30T07:55:00Z")]
    eager = plan(snap(nodes[:1], young, policy={"tiers": {"2": {"preempt_after_s": 0}}}),
                 deterministic=True)
    assert rules_broken(snap(nodes[:1], young), eager) == {"R16"}

    ending = [dict(jobs[0], expected_end_at="2026-11-30T08:05:00Z"),
              pend("t", 2, 8, submitted_at=OLD)]
    hasty = plan(snap(nodes[:1], ending, policy={"spare_ending_within_s": 0}),
                 deterministic=True)
    assert rules_broken(snap(nodes[:1], ending), hasty) == {"R17"}


def test_bad_section_9_input_names_the_field() -> None:
    from models import InputError

    nodes, jobs = holders(1)
    cases = [
        ({"recent_evictions": [{"job": "x", "at": "2026-11-30T08:00:01Z"}]},
         "recent_evictions[0].at: 2026-11-30T08:00:01+00:00 is after now"),
        ({"policy": {"thrash": {"window_s": -1}}}, "policy.thrash.window_s"),
        ({"policy": {"thrash": {"max_fraction": 1.5}}}, "policy.thrash.max_fraction"),
        ({"policy": {"thrash": {"min_evictions": -1}}}, "policy.thrash.min_evictions"),
        ({"policy": {"thrash": {"exempt_tiers": [7]}}},
         "policy.thrash.exempt_tiers: tier 7 is not defined in the policy (R15)"),
        ({"policy": {"tiers": {"2": {"preempt_after_s": -5}}}},
         "policy.tiers.2.preempt_after_s"),
        ({"policy": {"spare_ending_within_s": -1}}, "policy.spare_ending_within_s"),
    ]
    for extra, want in cases:
        data = {**snap(nodes, jobs), **extra}
        with pytest.raises(InputError) as exc:
            load_snapshot(data)
        assert any(want in e for e in exc.value.errors), (want, exc.value.errors)


def test_the_defaults_of_section_9() -> None:
    pol = load_snapshot(snap([], [])).policy
    assert pol.thrash is not None
    # max_fraction 0.03 rather than the contract's starting point 0.05, and the
    # extensions exempt_if "all", a GPU budget of 1.5% (at least 16 GPUs) and 1,800
    # GPU-s per victim past the budget: measured, docs/simulation.md
    assert (pol.thrash.window_s, pol.thrash.max_fraction, pol.thrash.min_evictions,
            pol.thrash.exempt_tiers, pol.thrash.exempt_if, pol.thrash.max_gpu_fraction,
            pol.thrash.min_gpus, pol.thrash.past_budget_gpu_s) == (
                3600, 0.03, 4, [1], "all", 0.015, 16, 1800)
    assert pol.thrash.gpu_limit(1024) == 16 and pol.thrash.gpu_limit(100_000) == 1500
    assert [pol.tiers[t].preempt_after_s for t in (1, 2, 3)] == [0, 600, 0]
    assert pol.spare_ending_within_s == 600
    merged = load_snapshot(snap([], [], policy={"thrash": {"window_s": 600},
                                                "tiers": {"4": {"preemptible": True}}})).policy
    assert merged.thrash is not None and merged.thrash.min_evictions == 4
    assert merged.thrash.window_s == 600 and merged.tiers[4].preempt_after_s == 0
    assert NOW == "2026-11-30T08:00:00Z"


@pytest.mark.parametrize("planner", PLANNERS)
def test_the_rolling_gpu_budget_counts_the_gpus_of_the_evictions(planner: str) -> None:
    # The extension thrash.max_gpu_fraction: 6 nodes of 8 GPUs (48 on up nodes), a
    # fraction of 0.5 allows floor(0.5 x 48) = 24 GPUs per hour (min_gpus 0: no
    # floor; the default floor of 32 would allow 32), 8 already freed in
    # the window (one recent eviction of 8 GPUs): 16 left, two whole nodes. The count
    # budget (B = 4, H = 1) would allow three. Three tier-2 jobs of 8 GPUs: two are
    # placed (r0, r1: 800 + 1,600 GPU-s), the third waits, THRASH_BUDGET, with the
    # GPUs in the detail. A recent eviction without "gpus" counts as 0 GPUs.
    nodes, jobs = holders(6)
    jobs += [pend(f"p{k}", 2, 8, submitted_at=OLD, priority=k) for k in range(3)]
    data = snap(nodes, jobs, policy={"thrash": {"max_gpu_fraction": 0.5, "min_gpus": 0}})
    data["recent_evictions"] = [{"job": "x", "at": "2026-11-30T07:30:00Z", "gpus": 8}]
    p = solve(data, planner)
    assert evicted(p) == ["r0", "r1"] and reasons(p) == {"p0": "THRASH_BUDGET"}
    assert ("rolling budget of 24 GPUs per 60 min (8 already in the window" in
            p["deferred"][0]["detail"])
    data["recent_evictions"][0].pop("gpus")
    assert len(solve(data, planner)["evictions"]) == 3  # count budget: 4 - 1 = 3
    free = plan(snap(nodes, jobs, policy={"thrash": None}), deterministic=True)
    assert len(free.evictions) == 3
    broken = dict(data, recent_evictions=[{"job": "x", "at": "2026-11-30T07:30:00Z",
                                           "gpus": 8}])
    assert rules_broken(broken, free) == {"R15"}


def test_an_exempt_job_takes_the_free_gpu_before_a_victims_gpu() -> None:
    # n0: r0 (tier 3, 7 GPUs, evicting it costs 7 x 100 = 700 GPU-s) and GPU 7 free.
    # Pending: a (tier 1) and b (tier 2), one GPU each. The window has 4 evictions
    # already: B = max(4, floor(0.03 x 1)) = 4, nothing left for evictions that are
    # not exempt. Admitting both means a evicting r0 (exempt) and b taking GPU 7:
    # the contract objective's optimum, which thrash.exempt_free_first: false keeps.
    # By default a takes GPU 7 instead, b's only way in would be evicting r0 outside
    # the budget: r0 keeps running, b waits.
    nodes = [node("n0")]
    jobs = [run("r0", 3, {"n0": [0, 1, 2, 3, 4, 5, 6]}),
            pend("a", 1, 1, submitted_at=OLD), pend("b", 2, 1, submitted_at=OLD)]
    recent = [{"job": f"old{i}", "at": "2026-11-30T07:30:00Z", "gpus": 1} for i in range(4)]
    data = {**snap(nodes, jobs), "recent_evictions": recent}
    p = solve(data)
    assert [(x["job"], x["placement"]) for x in p["placements"]] == [
        ("a", [{"node": "n0", "gpus": [7]}])]
    assert evicted(p) == [] and "b" in reasons(p)
    assert p["status"] == "feasible" and "exempt_free_first" in p["solver"]["detail"]
    # the whole model proved the contract objective's optimum, 1/1/0 GPUs: the plan
    # returned is 1 tier-2 GPU short of it, a gap of (1 - 0) / 1
    assert p["solver"]["gap"] == 1.0 and p["solver"]["bound"] is None
    assert ("bound from the whole model's phases: the plan tier-2 GPUs 0 against at most 1 "
            "(the bound is the plain objective's") in p["solver"]["detail"]
    g = solve(data, "greedy")  # the greedy planner gets the same choice
    assert [x["job"] for x in g["placements"]] == ["a"] and evicted(g) == []
    assert g["placements"][0]["placement"] == [{"node": "n0", "gpus": [7]}]
    off = solve({**snap(nodes, jobs, {"thrash": {"exempt_free_first": False}}),
                 "recent_evictions": recent})
    assert sorted((x["job"], x["placement"][0]["gpus"]) for x in off["placements"]) == [
        ("a", [0]), ("b", [7])]
    assert [(e["job"], e["preemptors"]) for e in off["evictions"]] == [("r0", ["a"])]


def test_an_exempt_job_does_not_make_room_for_an_impatient_job() -> None:
    # n0: r0 (tier 3, 7 GPUs, 700 GPU-s) and GPU 7 free; the window is empty (B = 4,
    # 4 left). Pending: a (tier 1, 1 GPU, submitted at 04:00) and b (tier 2, 1 GPU,
    # submitted at 07:58: 120 s of tier 2's 600 s of patience, so R16 lets it take
    # only GPUs free in the snapshot, until 08:08). Admitting both means a evicting
    # r0 and b taking GPU 7: within the budget, but b gets in by a's exempt eviction
    # before its patience ran out, and a waits for r0's exit where GPU 7 would start
    # it at once. By default a takes GPU 7; b would need r0's GPU, which R16 keeps
    # from it: r0 keeps running, b waits (OUTRANKED: the GPU it could take went to a
    # job of a higher tier). Once b is past its
    # patience (submitted at 04:00) nothing moves: both are admitted through r0.
    nodes = [node("n0")]
    jobs = [run("r0", 3, {"n0": [0, 1, 2, 3, 4, 5, 6]}),
            pend("a", 1, 1, submitted_at=OLD), pend("b", 2, 1, submitted_at="2026-11-30T07:58:00Z")]
    data = snap(nodes, jobs)
    for planner in ("cpsat", "greedy"):
        p = solve(data, planner)
        assert [(x["job"], x["placement"]) for x in p["placements"]] == [
            ("a", [{"node": "n0", "gpus": [7]}])], planner
        assert evicted(p) == []
        assert reasons(p) == {"b": "OUTRANKED"}
    p = solve(data)
    assert p["status"] == "feasible" and "exempt_free_first" in p["solver"]["detail"]
    off = solve(snap(nodes, jobs, {"thrash": {"exempt_free_first": False}}))
    assert sorted(x["job"] for x in off["placements"]) == ["a", "b"]
    assert [(e["job"], e["preemptors"]) for e in off["evictions"]] == [("r0", ["a"])]
    patient = [*jobs[:2], pend("b", 2, 1, submitted_at=OLD)]
    for planner in ("cpsat", "greedy"):
        p = solve(snap(nodes, patient), planner)
        assert sorted(x["job"] for x in p["placements"]) == ["a", "b"], planner
        assert evicted(p) == ["r0"]


def test_an_exempt_job_does_not_evict_for_a_job_without_the_right_to() -> None:
    # n0: r0 (tier 2, 1 GPU, running since 04:00: past its 3,600 s immunity) on GPU 0,
    # r3 (tier 3, 6 GPUs, started 07:50: 600 s of its 1,800 s immunity, R6) on GPUs
    # 1-6, GPU 7 free; the window is empty (B = 4, 4 left). Pending: a (tier 1) and b
    # (tier 2, past its patience), one GPU each. Admitting both means a evicting r0
    # (tier 1 may preempt tier 2) and b taking GPU 7: within the budget and past b's
    # patience, but tier 2 may preempt only tier 3 (R7), so b displaces a tier-2 job
    # it could not evict itself, through a's exemption. By default a takes GPU 7, b
    # would need r0's GPU, which its rights do not reach: r0 keeps running and b
    # waits. With r0 a tier-3 job, b could evict it itself: nothing moves.
    nodes = [node("n0")]
    jobs = [run("r0", 2, {"n0": [0]}), run("r3", 3, {"n0": [1, 2, 3, 4, 5, 6]},
                                          started="2026-11-30T07:50:00Z"),
            pend("a", 1, 1, submitted_at=OLD), pend("b", 2, 1, submitted_at=OLD)]
    for planner in ("cpsat", "greedy"):
        p = solve(snap(nodes, jobs), planner)
        assert [(x["job"], x["placement"]) for x in p["placements"]] == [
            ("a", [{"node": "n0", "gpus": [7]}])], planner
        assert evicted(p) == [] and reasons(p) == {"b": "OUTRANKED"}, planner
    off = solve(snap(nodes, jobs, {"thrash": {"exempt_free_first": False}}))
    assert sorted((x["job"], x["placement"][0]["gpus"]) for x in off["placements"]) == [
        ("a", [0]), ("b", [7])]
    assert [(e["job"], e["preemptors"]) for e in off["evictions"]] == [("r0", ["a"])]
    lower = [run("r0", 3, {"n0": [0]}), *jobs[1:]]
    for planner in ("cpsat", "greedy"):
        p = solve(snap(nodes, lower), planner)
        assert sorted(x["job"] for x in p["placements"]) == ["a", "b"], planner
        assert evicted(p) == ["r0"], planner


def _smalls_and_bigs(recent_n: int) -> tuple[list, list, list, list[str]]:
    """n0 and n1 hold eight 1-GPU tier-3 jobs each (s00-s17), n2 and n3 one 8-GPU
    tier-3 job each (b2, b3, restore 150 s); the tier-1 gang g (2 x 8 GPUs) is
    pending; ``recent_n`` 1-GPU evictions in the window. Nodes, jobs, the recent
    evictions and the small jobs' ids."""
    nodes = [node(f"n{i}") for i in range(4)]
    jobs = [run(f"s{n}{k}", 3, {f"n{n}": [k]}) for n in (0, 1) for k in range(8)]
    jobs += [run(f"b{n}", 3, {f"n{n}": ALL8}, restore=150.0) for n in (2, 3)]
    jobs.append(pend("g", 1, 8, nodes=2, submitted_at=OLD))
    recent = [{"job": f"old{i}", "at": "2026-11-30T07:30:00Z", "gpus": 1}
              for i in range(recent_n)]
    return nodes, jobs, recent, sorted(f"s{n}{k}" for n in (0, 1) for k in range(8))


def test_past_the_budget_an_exempt_gang_takes_the_nodes_with_fewest_victims() -> None:
    # n0 and n1 each hold eight 1-GPU tier-3 jobs (restore 100 s: 100 GPU-s each, 800
    # a node); n2 and n3 one 8-GPU tier-3 job each (restore 150 s: 1,200 GPU-s). The
    # window has 4 evictions: B = max(4, floor(0.03 x 18)) = 4, nothing left. The
    # tier-1 gang g (2 nodes x 8 GPUs) is exempt either way. The contract's objective
    # takes the cheapest nodes, n0 and n1: 16 victims for 1,600 GPU-s, all past the
    # budget. With thrash.past_budget_gpu_s 1,800 (the default) each victim past the
    # budget costs 1,800 GPU-s more: n0 and n1 1,600 + 16 x 1,800 = 30,400, n2 and n3
    # 2,400 + 2 x 1,800 = 6,000: 2 victims. At 50 GPU-s each, 1,600 + 800 = 2,400
    # against 2,400 + 100: n2 and n3 cost more, n0 and n1 again.
    nodes, jobs, recent, smalls = _smalls_and_bigs(4)
    data = {**snap(nodes, jobs), "recent_evictions": recent}
    for planner in ("cpsat", "greedy"):
        p = solve(data, planner)
        assert evicted(p) == ["b2", "b3"], planner
        assert p["objective"]["eviction_cost_gpu_s"] == 2400
        assert p["objective"]["evictions_past_budget"] == 2
        low = solve({**snap(nodes, jobs, {"thrash": {"past_budget_gpu_s": 50}}),
                     "recent_evictions": recent}, planner)
        assert evicted(low) == smalls, planner
        assert low["objective"]["evictions_past_budget"] == 16
    off = solve({**snap(nodes, jobs, {"thrash": {"past_budget_gpu_s": 0}}),
                 "recent_evictions": recent})
    assert evicted(off) == smalls
    assert off["objective"]["eviction_cost_gpu_s"] == 1600
    assert "evictions_past_budget" not in off["objective"]  # written only when not 0


def test_a_gang_that_uses_up_the_window_weighs_the_victims_past_it() -> None:
    # The nodes of the test above, with 1 eviction left in the window (3 of B = 4):
    # the objective counts max(0, victims - 1) past the budget. n0 and n1: 16
    # victims, 1,600 + 15 x 1,800 = 28,600 GPU-s; n2 and n3: 2 victims, 2,400 + 1 x
    # 1,800 = 4,200. The greedy planner weighs each node's option alone, with the room
    # the state has left: n0 800 + 7 x 1,800 = 13,400, n2 1,200. Both take n2 and n3. With
    # min_evictions 20 (20 left, nothing past) n0 and n1 are cheaper: 1,600 < 2,400.
    nodes, jobs, recent, smalls = _smalls_and_bigs(3)
    data = {**snap(nodes, jobs), "recent_evictions": recent}
    for planner in ("cpsat", "greedy"):
        p = solve(data, planner)
        assert evicted(p) == ["b2", "b3"], planner
        assert p["objective"]["eviction_cost_gpu_s"] == 2400
        assert p["objective"]["evictions_past_budget"] == 1
        roomy = solve({**snap(nodes, jobs, {"thrash": {"min_evictions": 20}}),
                       "recent_evictions": recent}, planner)
        assert evicted(roomy) == smalls, planner
        assert "evictions_past_budget" not in roomy["objective"]


def test_the_job_an_exempt_job_swaps_with_takes_its_victim_within_the_budget() -> None:
    # n0 and n1: r0 and r1 (tier 3) on GPUs 0-6 of each, GPU 7 free on both. 3
    # evictions in the window: 1 left. A decision with the tier-1 jobs a and a2 on
    # r0's and r1's GPU 0 (both victims exempt) and the tier-2 jobs b and c on the
    # free GPUs 7 has 2 victims: past what is left, were they not exempt. a swaps
    # with b, a2 with c (donors least important first, then by id); b and c take
    # GPU 0 of r0 and r1, now victims that are not exempt: 2 > 1, so clean drops the
    # least valuable placement using one, b (the order: tier, GPUs, priority, id),
    # and r0 with it. a and a2 end on the free GPUs, c evicts r1 within the budget.
    from planner.core.decision import Decision, exempt_free_first, preemptors_of
    from planner.core.problem import build_problem

    nodes = [node("n0"), node("n1")]
    jobs = [run("r0", 3, {"n0": [0, 1, 2, 3, 4, 5, 6]}), run("r1", 3, {"n1": [0, 1, 2, 3, 4, 5, 6]}),
            pend("a", 1, 1, submitted_at=OLD), pend("a2", 1, 1, submitted_at=OLD),
            pend("b", 2, 1, submitted_at=OLD), pend("c", 2, 1, submitted_at=OLD)]
    recent = [{"job": f"old{i}", "at": "2026-11-30T07:30:00Z", "gpus": 1} for i in range(3)]
    problem = build_problem(load_snapshot({**snap(nodes, jobs), "recent_evictions": recent}))
    before = Decision({"r0", "r1"}, {"a": [(0, 1 << 0)], "a2": [(1, 1 << 0)],
                                     "b": [(0, 1 << 7)], "c": [(1, 1 << 7)]})
    d, moved = exempt_free_first(problem, before)
    assert moved == 2
    assert d.placements == {"a": [(0, 1 << 7)], "a2": [(1, 1 << 7)], "c": [(1, 1 << 0)]}
    assert preemptors_of(problem, d) == {"r1": ["c"]}
    # with the window empty (4 left) the two victims fit even were they not exempt:
    # nothing moves
    problem = build_problem(load_snapshot(snap(nodes, jobs)))
    assert exempt_free_first(problem, before) == (before, 0)
