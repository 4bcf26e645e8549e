"""Simulator stories with outcomes worked out by hand (times in seconds from the
first arrival; ticks every 60 s on that grid).

Shared physics (``planner/sim/engine.py``): a victim with a signal exits when its
flush ends (``max(F / bw, shard / local) + barrier + cleanup``; the grace is only
its deadline: a flush that does not fit is killed at it), gives its GPUs back
then and is requeued (``last_preempted_at``); a placed job starts when its last
GPU comes back. cpsat gives a victim exactly the grace it needs (``max(min_s,
safety * (flush + barrier + cleanup))``, 60 s for a tiny checkpoint); naive gives
everyone 30 s. The default checkpoint here is 0.8 GB at 100 GB/s without
barrier or cleanup: a flush of 0.008 s. Tier 2 waits 600 s before it may evict
(patience, R16) and the simulator passes each job's submission time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from models import load_snapshot
from planner.sim.engine import SimConfig, simulate
from planner.sim.metrics import compute_metrics
from planner.sim.traces import TraceJob

BASE = datetime(2026, 1, 5, tzinfo=UTC).timestamp()


def cluster(nodes: int = 1, bw: float = 100.0, policy: dict | None = None):
    return load_snapshot({
        "version": 1, "now": "2026-01-05T00:00:00Z",
        "storage": [{"id": "nfs", "write_gb_per_s": bw}],
        "nodes": [{"id": f"n{i}", "gpus": 8} for i in range(nodes)],
        "jobs": [], "policy": policy or {}})


def job(jid: str, submit: float, duration: float, tier: int, **kw) -> TraceJob:
    d = {"gpus_per_node": 8, "checkpoint_gb": 0.8, "checkpoint_interval_s": 1800.0,
         "restore_s": 0.0, "signal": "SIGTERM", "team": f"team-{tier}"}
    d.update(kw)
    return TraceJob(id=jid, submit=BASE + submit, duration_s=duration, tier=tier, **d)


def run(planner: str, snap, trace, **cfg):
    res = simulate(snap, trace, SimConfig(planner=planner, deterministic=True, **cfg))
    return res, compute_metrics(res)


def rel(res, jid: str, kind: str) -> list[float]:
    j = next(x for x in res.jobs if x["id"] == jid)
    return [t - BASE for k, t in j["history"] if k == kind]


# --------------------------------------------------------------------------- ping-pong

def ping_pong_trace():
    # X: tier 3, 8 GPUs, needs 10,000 s. Six tier-2 jobs of 300 s arrive every 900 s.
    ys = [job(f"y{i}", 300 + 900 * i, 300, 2) for i in range(6)]
    return [job("x", 0, 10_000, 3)] + ys


def test_ping_pong_naive_evicts_x_every_time():
    # naive, grace 30 s, no immunity, no backoff, no patience:
    #   0 X starts. 300 Y0 evicts X, which exits 0.008 s later; Y0 runs 300.008-600.008;
    #   X requeued at 300.008, restarts at the tick after Y0 ends, 660.
    #   1200 Y1 evicts X (runs -1500.008), X back 1560; 2100 Y2 -> X back 2460;
    #   3000 Y3 -> 3360; 3900 Y4 -> 4260; 4800 Y5 -> X back 5160 for good.
    # X keeps 300 + 5 * 540 = 3000 s (its 0.8 GB flush takes 0.008 s), 7000 s left:
    # done at 5160 + 7000 = 12160. Six evictions, all of X, 540 s of progress between
    # them (< 1 h): six consecutive preemptions.
    res, m = run("naive", cluster(), ping_pong_trace())
    assert rel(res, "x", "evict") == [300, 1200, 2100, 3000, 3900, 4800]
    assert rel(res, "x", "start") == [0, 660, 1560, 2460, 3360, 4260, 5160]
    assert rel(res, "x", "done") == [12160]
    assert m["evictions"] == 6
    assert m["max_consecutive_preemptions"] == 6
    assert m["wasted_gpu_h"]["lost"] == 0
    assert m["completed"] == 7


def test_ping_pong_cpsat_respects_immunity_and_backoff():
    # cpsat, default policy: tier 3 immune 1800 s after each start, held 1800 s after
    # each of its first three preemptions; tier 2 patient for 600 s.
    #   0 X starts (immune until 1800). Y0 (300) and Y1 (1200) wait (PROTECTED).
    #   1800 X evicted (grace 60, flush 0.008 s): it exits at 1800.008, Y0 runs
    #   1800.008-2100.008; X requeued 1800.008, held until 3600.008.
    #   2160 Y1 (-2460), 2460 Y2 (arrived 2100, -2760), 3000 Y3 (-3300).
    #   3660 (the tick after the hold) X restarts (immune until 5460); Y4 (3900) and
    #   Y5 (4800) wait. 5460 X evicted again (Y4 has waited 1,560 s), exits 5460.008,
    #   Y4 runs to 5760.008, X held until 7260.008; 5820 Y5 (-6120). 7320 X restarts
    #   with 2 x 1800 s kept: done 7320 + 6400 = 13720.
    res, m = run("cpsat", cluster(), ping_pong_trace())
    assert rel(res, "x", "evict") == [1800, 5460]
    assert rel(res, "x", "release") == pytest.approx([1800.008, 5460.008])
    assert rel(res, "x", "start") == [0, 3660, 7320]
    assert rel(res, "x", "done") == [13720]
    assert m["evictions"] == 2
    assert m["max_consecutive_preemptions"] == 2
    assert m["wasted_gpu_h"]["lost"] == 0
    assert m["completed"] == 7


# --------------------------------------------------------------------------- storm

def storm_trace():
    # Four tier-3 jobs fill four nodes at 0 (40 GB checkpoints, every 2400 s); at 3600
    # four tier-1 jobs arrive. Storage: 1 GB/s shared, no local limit.
    t3 = [job(f"b{i}", 0, 20_000, 3, checkpoint_gb=40.0, checkpoint_interval_s=2400.0)
          for i in range(4)]
    t1 = [job(f"p{i}", 3600, 5000, 1) for i in range(4)]
    return t3 + t1


def test_storm_limit_staggers_evictions_over_ticks():
    # R11 with grace max 180 s, safety 2: k victims flush 40k GB at 1 GB/s, so need
    # 2 * 40k s; 2 victims need 160 s <= 180, 3 would need 240. So cpsat evicts two
    # at 3600 (grace 160) and the other two at the next tick, 3660; every flush fits
    # (80 s <= 160 s): no progress lost. (The tier-1 jobs are exempt from R15.)
    res, m = run("cpsat", cluster(nodes=4, bw=1.0), storm_trace(), days=0.1)
    ev = sorted((e["t"] - BASE, e["job"]) for e in res.evictions)
    assert [t for t, _ in ev] == [3600, 3600, 3660, 3660]
    assert all(e["grace_s"] == 160 and e["saved"] for e in res.evictions)
    assert [(s["t"] - BASE, s["flush_gb"]) for s in res.storms] == [(3600, 80.0), (3660, 80.0)]
    assert m["wasted_gpu_h"]["lost"] == 0
    assert m["storage"]["nfs"]["storm_ticks_over_bandwidth"] == 0
    # the tier-1 jobs start when their victims' flushes end: 3600 + 80 and 3660 + 80,
    # not at the end of the 160 s grace
    starts = sorted(rel(res, f"p{i}", "start")[0] for i in range(4))
    assert starts == [3680, 3680, 3740, 3740]


def test_storm_naive_evicts_all_at_once_and_loses_progress():
    # naive evicts all four at 3600 with 30 s grace: 160 GB at 1 GB/s takes 160 s > 30,
    # so each falls back to its periodic checkpoint at 2400: 1200 s * 8 GPUs * 4 lost.
    res, m = run("naive", cluster(nodes=4, bw=1.0), storm_trace(), days=0.1)
    assert sorted(e["t"] - BASE for e in res.evictions) == [3600] * 4
    assert not any(e["saved"] for e in res.evictions)
    assert m["wasted_gpu_h"]["lost"] * 3600 == pytest.approx(4 * 8 * 1200)
    assert m["failed_flushes"] == 4
    st = m["storage"]["nfs"]
    assert st["peak_flush_write_gb_per_s"] == pytest.approx(160 / 30)  # 5.3x the bandwidth
    assert st["storm_ticks_over_bandwidth"] == 1


# --------------------------------------------------------------------------- backoff

def test_backoff_holds_grow_30_30_30_60_120_min():
    # Default policy: cooldown(k) = 1800 s for k <= 3, then 1800 * 2^(k-3): 3600, 7200.
    # One 8-GPU node; X (tier 3) is evicted as soon as its 1800 s immunity ends by a
    # tier-2 job that arrived 60 s after X (re)started (and has waited out its 600 s of
    # patience by then). Cycle k: X starts s_k, is evicted at s_k + 1800 and exits
    # 0.008 s later (r_k, its requeue), and restarts at the first tick after
    # r_k + cooldown(k): s_{k+1} = s_k + 1860 + cooldown(k) (the node is free again at
    # r_k + 60: each Y needs 60 s). The hold seen from the requeue is 59.992 s longer.
    #   s = 0, 3660, 7320, 10980, 16440 (+1860+3600), 25500 (+1860+7200)
    starts = [0, 3660, 7320, 10980, 16440, 25500]
    ys = [job(f"y{k}", s + 60, 60, 2) for k, s in enumerate(starts[:5])]
    res, m = run("cpsat", cluster(), [job("x", 0, 20_000, 3)] + ys)
    assert rel(res, "x", "start") == starts
    releases = rel(res, "x", "release")
    holds = [round(s - r - 59.992, 6) for r, s in zip(releases, starts[1:])]
    assert holds == [1800, 1800, 1800, 3600, 7200]
    # X kept 5 * 1800 s; the remaining 11,000 s run from 25500
    assert rel(res, "x", "done") == [36500]
    assert m["max_preemptions"] == 5


# --------------------------------------------------------------------------- lost progress

def grace_trace():
    # X: tier 3, 40 GB checkpoint every 1800 s, barrier 5 s, cleanup 5 s, restore 100 s,
    # needs 5000 s. Y: tier 1, arrives at 3960 (a tick), runs 600 s. Storage 1 GB/s.
    return [job("x", 0, 5000, 3, checkpoint_gb=40.0, barrier_s=5.0, cleanup_s=5.0,
                restore_s=100.0),
            job("y", 3960, 600, 1)]


def test_naive_grace_too_short_loses_progress_since_last_checkpoint():
    # naive at 3960: grace 30 s, but the flush takes 40 / 1 + 5 + 5 = 50 s: X is killed
    # at its deadline, falls back to its periodic checkpoint at 3600 and loses
    # 360 s * 8 GPUs = 2880 GPU-s. Grace held: 30 * 8 = 240 GPU-s. Y runs 3990-4590;
    # X restarts at 4620, restores 100 s (800 GPU-s), resumes at 4720 from 3600: done
    # 4720 + 1400 = 6120.
    # Allocated: X 3960 * 8 + (6120 - 4620) * 8 = 43680, Y 600 * 8 = 4800, grace 240;
    # useful: 8 * 5000 + 8 * 600 = 44800 = 48720 - 2880 - 800 - 240.
    res, m = run("naive", cluster(bw=1.0), grace_trace())
    e, = res.evictions
    assert e["flush_s"] == 50 and e["grace_s"] == 30 and not e["saved"]
    assert res.totals["lost_gpu_s"] == 2880
    assert res.totals["flush_gpu_s"] == 240
    assert res.totals["restore_gpu_s"] == 800
    assert res.totals["useful_gpu_s"] == 44800
    assert m["allocated_gpu_h"] * 3600 == pytest.approx(48720)
    assert m["wasted_gpu_h"]["total"] * 3600 == pytest.approx(2880 + 800 + 240)
    assert m["goodput"] == pytest.approx(44800 / 48720)
    assert rel(res, "x", "done") == [6120]


def test_cpsat_grace_covers_the_flush():
    # cpsat gives X need = max(60, 2 * (40 + 5 + 5)) = 100 s: the 50 s flush fits,
    # nothing is lost; X exits when it ends, and Y starts at 3960 + 50 (not at the end
    # of the grace, 4060). GPUs held by the victim: 50 s x 8 = 400 GPU-s.
    res, _ = run("cpsat", cluster(bw=1.0), grace_trace())
    e, = res.evictions
    assert e["grace_s"] == 100 and e["saved"] and e["exit_s"] == 50
    assert res.totals["lost_gpu_s"] == 0
    assert res.totals["flush_gpu_s"] == 400
    assert rel(res, "y", "start") == [4010]


# --------------------------------------------------------------------------- engine rules

def test_idle_ticks_are_skipped_and_seeds_repeat():
    # one job alone: planned once, at its arrival. The engine only looks again at the
    # tick after a plan that did something (60), when its immunity ends (1800) and at
    # its completion (7200); with nothing pending none of those calls the planner.
    res, _ = run("naive", cluster(), [job("a", 0, 7200, 3)])
    assert res.planner_calls == 1
    assert [t - BASE for t in res.samples["t"]] == [0, 60, 1800, 7200]
    a = run("naive", cluster(), ping_pong_trace())[1]
    b = run("naive", cluster(), ping_pong_trace())[1]
    for k in ("evictions", "wasted_gpu_h", "queue_delay_s", "completion_time_s"):
        assert a[k] == b[k]


def test_requeued_job_queue_age_restarts():
    # X's queue age restarts at its requeue: in the naive ping-pong X waits
    # 300.008 -> 660, 1200.008 -> 1560, ..., 4800.008 -> 5160: 6 waits of 359.992 s (its
    # first start was immediate), each counted from its requeue, not from its submission
    res, _ = run("naive", cluster(), ping_pong_trace())
    x = next(j for j in res.jobs if j["id"] == "x")
    assert x["wait_s"] == pytest.approx(6 * 359.992)


# --------------------------------------------------------------------------- cross-tick rules

def burst_trace():
    # 256 one-GPU tier-3 jobs fill 32 nodes at 0 (10 h each); at 3600, past their
    # 1800 s immunity, a team submits 200 one-GPU tier-2 jobs of 2 h at once.
    fill = [job(f"f{i:03d}", 0, 36_000, 3, gpus_per_node=1) for i in range(256)]
    burst = [job(f"b{i:03d}", 3600, 7200, 2, gpus_per_node=1) for i in range(200)]
    return fill + burst


@pytest.mark.parametrize("planner", ["cpsat", "greedy"])
def test_a_burst_into_a_full_cluster_stays_within_the_rolling_budget(planner):
    # R15 with the default policy: 256 running jobs, B = max(4, floor(0.03 x 256)) =
    # 7 evictions per hour. The simulator passes its own evictions of the last hour
    # (recent_evictions), so in every hour [t - 3600, t] ending at an eviction there
    # are at most 7, and patience (R16) keeps the first ones until 3600 + 600 = 4200.
    # The window [now - 3600, now) still counts 4200's seven at 7800, not at the next
    # tick, 7860: seven evictions at 4200, 7860, 11520 and 15180, the run ending at
    # 18000. No thrash alert (7 of ~256 active jobs is 2.7% < 5%). Without R15 the
    # burst evicts one tier-3 job per tier-2 job: all 200 at 4200.
    res, m = run(planner, cluster(nodes=32), burst_trace(), days=(3600 + 4 * 3600) / 86400)
    times = sorted(e["t"] - BASE for e in res.evictions)
    assert max(sum(1 for u in times if t - 3600 <= u <= t) for t in times) == 7
    assert times == [4200] * 7 + [7860] * 7 + [11520] * 7 + [15180] * 7
    assert m["thrash_windows"] == 0
    free = run(planner, cluster(nodes=32, policy={"thrash": None}), burst_trace(),
               days=(3600 + 3600) / 86400)[0]
    assert sorted({e["t"] - BASE for e in free.evictions}) == [4200]
    assert len(free.evictions) == 200


def test_thrash_alerts_say_which_tiers_evicted_and_how_often_the_same_job():
    # The naive ping-pong: X is evicted by tier-2 jobs at 300, 1200, 2100 and 3000
    # (hour 0) and at 3900 and 4800 (hour 1), with one or two jobs active: both hours
    # are alerts. Hour 0: 4 evictions by tier-2 placements, 3 of them repeats of X;
    # hour 1: 2, one repeat.
    _res, m = run("naive", cluster(), ping_pong_trace())
    assert m["thrash_windows"] == 2
    assert [(a["hour"], a["evictions"], a["by_preemptor_tier"], a["repeats"])
            for a in m["thrash_alerts"]] == [(0, 4, {"2": 4}, 3), (1, 2, {"2": 2}, 1)]
    assert m["thrash_by_preemptor_tier"] == {"2": 6} and m["thrash_repeats"] == 4


def test_running_jobs_carry_their_time_limit_and_the_history_of_evictions():
    # The cpsat ping-pong with X's time limit 12,000 s: each run's expected_end_at is
    # its start plus 12,000 s. The snapshot at 2160 (after X's eviction at 1800) lists
    # that eviction in recent_evictions; at 5460 + 60 the one at 1800 has left the hour.
    from planner.sim.engine import Simulator

    trace = ping_pong_trace()
    trace[0].time_limit_s = 12_000.0
    sim = Simulator(cluster(), trace, SimConfig(planner="cpsat", deterministic=True))
    seen: dict[float, Any] = {}
    real = sim.plan_fn

    def spy(snap):
        seen[snap.now.timestamp() - BASE] = snap
        return real(snap)

    sim.plan_fn = spy
    res = sim.run()
    first = seen[300.0].job_map()["x"]
    assert first.expected_end_at.timestamp() - BASE == 12_000
    assert [e.job for e in seen[2160.0].recent_evictions] == ["x"]
    assert seen[2160.0].recent_evictions[0].at.timestamp() - BASE == 1800
    later = [t for t in seen if t > 5460]
    assert later and seen[later[0]].recent_evictions[-1].at.timestamp() - BASE == 5460
    assert all(e.at.timestamp() - BASE > 1800 for e in seen[later[0]].recent_evictions)
    assert rel(res, "x", "evict") == [1800, 5460]
    off = Simulator(cluster(), trace, SimConfig(planner="cpsat", deterministic=True,
                                                time_limits=False))
    off.plan_fn = lambda snap: seen.setdefault(-1, snap) and real(snap)
    off.run()
    assert seen[-1].job_map()["x"].expected_end_at is None


def test_pending_time_is_split_by_the_reason_each_plan_gave():
    # X (tier 3) runs 0-7,200 s on the only node; Y (tier 2) arrives at 60. Y waits out
    # its patience, 600 s to 660 (PATIENCE), then X's immunity up to 1,800 s (tier 3:
    # 1,800 s, PROTECTED: 1,140 s), and evicts X at 1,800. Under naive, X is evicted at
    # 60 and waits for Y to end at 660: 600 s OUTRANKED.
    trace = [job("x", 0, 7200, 3), job("y", 60, 600, 2)]
    res, m = run("cpsat", cluster(), trace)
    assert res.wait_by_reason_s == {"2:PATIENCE": 600.0, "2:PROTECTED": 1140.0}
    assert m["wait_by_reason_h"] == {"2": {"PROTECTED": 0.32, "PATIENCE": 0.17}}
    assert rel(res, "x", "evict") == [1800]
    res, m = run("naive", cluster(), trace)
    assert res.wait_by_reason_s == {"3:OUTRANKED": 600.0}


@pytest.mark.parametrize(("before", "evicted_at"), [(7200.0, 300.0), (600.0, 1200.0)])
def test_a_warm_start_job_is_as_old_as_its_real_start(before: float, evicted_at: float):
    # x (tier 3, 8 GPUs) started `before` seconds before the simulated start and is
    # still running there (carry-over); a (tier 1, 8 GPUs) arrives 300 s in. Tier 3's
    # minimum runtime is 30 min (R6): x, 2 h old, is evicted at once (300 s); x, 10
    # min old, is immune until 20 min in (1,200 s). Had x started at the simulated
    # start, a would wait until 30 min in.
    from planner.sim.traces import slice_trace

    trace = slice_trace([job("x", -before, 86_400.0, 3), job("a", 300.0, 600.0, 1)],
                        BASE, 1.0, carry_over=True)
    res, _m = run("cpsat", cluster(), trace, days=1.0 / 24)
    assert rel(res, "x", "evict") == [evicted_at]
    x = next(j for j in res.jobs if j["id"] == "x")
    assert x["carry_over"] and rel(res, "x", "start")[0] == 0.0


# ----------------------------------------------------------- what the engine allows

def test_a_job_evicted_before_it_started_leaves_its_victims_hold():
    # A (tier 3) holds the node; its 100,000 GB checkpoint cannot flush within
    # naive's 30 s grace, so it exits at its deadline. B (tier 2, +100 s) evicts it at
    # the tick of +100 s and waits for A's exit at +130 s; C (tier 1, +105 s) evicts B
    # at +110 s, before B ever ran. The GPUs are A's until +130 s: C starts then, not
    # when B's own (empty) exit ends at +110.01 s, and no GPU is held twice
    snap = cluster()
    trace = [job("A", 0, 10_000, 3, checkpoint_gb=100_000), job("B", 100, 10_000, 2),
             job("C", 105, 1_000, 1)]
    res, m = run("naive", snap, trace, tick_s=10)
    assert rel(res, "C", "start") == [130.0]
    assert m["utilization"] <= 1.0


def test_a_preemption_window_that_opens_wakes_the_planner():
    # Tier 3 may be evicted only from 22:00 to 06:00 (R8), and has no minimum runtime.
    # x (tier 3, 10 h) starts at 20:00; t1 (tier 1) arrives at 21:00 and is refused
    # (outside the window). Nothing else happens: the window's opening at 22:00 wakes
    # the planner, which evicts x then (a 0.008 s flush): t1 waits 1 h, not 9 h until
    # x ends
    policy = {"tiers": {"3": {"min_runtime_s": 0,
                              "windows": [{"start": "22:00", "end": "06:00"}]}}}
    snap = cluster(policy=policy)
    trace = [job("x", 20 * 3600, 36_000, 3), job("t1", 21 * 3600, 600, 1)]
    res, _m = run("greedy", snap, trace)
    (start,) = rel(res, "t1", "start")
    assert 22 * 3600 <= start < 22 * 3600 + 1
    assert rel(res, "x", "evict") == [22 * 3600]


def test_a_plan_that_evicts_a_job_twice_is_a_planner_bug():
    # (naive's plan with its first eviction repeated: the strict simulator refuses it
    # rather than count the eviction, its lost work and its GPUs twice)
    from models import Plan
    from planner.sim.engine import SimulationError
    from planner.sim.naive import plan_naive

    def twice(s: Any) -> Plan:
        p = plan_naive(s)
        return p.model_copy(update={"evictions": [*p.evictions, *p.evictions[:1]]})

    trace = [job("x", 0, 10_000, 3), job("y", 2_500, 600, 1)]
    with pytest.raises(SimulationError, match="plan evicts 'x' twice"):
        simulate(cluster(), trace, SimConfig(planner="naive"), planner=twice)


def test_a_job_still_waiting_for_its_victims_at_the_end_has_not_started():
    # A's flush cannot fit naive's 30 s grace: evicted at +110 s for C (tier 1, +105 s),
    # it exits at +140 s, after the run's end at +120 s. C waited 15 s up to the end
    # and never started
    trace = [job("A", 0, 10_000, 3, checkpoint_gb=100_000), job("C", 105, 1_000, 1)]
    res, m = run("naive", cluster(), trace, tick_s=10, days=120 / 86400)
    c = next(j for j in res.jobs if j["id"] == "C")
    assert (c["wait_s"], c["started"], rel(res, "C", "start")) == (15.0, False, [])
    assert m["queue_delay_s"]["1"]["max"] == 15.0
