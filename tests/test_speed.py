"""This machine's speed factor and the times it scales (planner/solver/speed.py).

No assertion here depends on how fast the machine is: the measurements are replaced
by fixed numbers, or the factor is set by PREEMPT_PLANNER_SPEED.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from planner import plan
from planner.core.budget import Budget
from planner.core.decision import Decision
from planner.sim.generate import generate
from planner.solver import cpsat, lanes, lns, model, portfolio, speed
from planner.solver.speed import REF_CPSAT_S, REF_PYTHON_S, factor, factor_of

C, P = REF_CPSAT_S, REF_PYTHON_S


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """No override, and measurements of 2 x the references (factor 2.0); the list
    names each measurement taken. The cached measurement is dropped before and
    after."""
    taken: list[str] = []

    def cp() -> float:
        taken.append("cpsat")
        return 2 * C

    def py() -> float:
        taken.append("python")
        return 2 * P

    monkeypatch.delenv(speed.ENV, raising=False)
    monkeypatch.setattr(speed, "time_cpsat", cp)
    monkeypatch.setattr(speed, "time_python", py)
    speed.measured.cache_clear()
    yield taken
    speed.measured.cache_clear()


def test_the_factor_is_the_geometric_mean_of_the_two_ratios_in_steps_clamped() -> None:
    # the same work twice as long: 2.0; 4 x as long on CP-SAT and as long in Python:
    # sqrt(4 x 1) = 2.0; as fast: 1.0
    assert factor_of(2 * C, 2 * P) == pytest.approx(2.0)
    assert factor_of(4 * C, P) == pytest.approx(2.0)
    assert factor_of(C, P) == pytest.approx(1.0)
    # steps of 2 ** (1/4): 5% slower or 7% faster is 1 (log2 1.05 = 0.07 and
    # log2 0.93 = -0.10, times 4: 0.28 and -0.42, both round to 0); 30% slower is
    # 2 ** (2/4) = 1.414 (4 x log2 1.3 = 1.51, rounds to 2); 10% slower is
    # 2 ** (1/4) = 1.189 (4 x log2 1.1 = 0.55, rounds to 1)
    assert factor_of(1.05 * C, 1.05 * P) == 1.0
    assert factor_of(0.93 * C, 0.93 * P) == 1.0
    assert factor_of(1.3 * C, 1.3 * P) == pytest.approx(2 ** 0.5)
    assert factor_of(1.1 * C, 1.1 * P) == pytest.approx(2 ** 0.25)
    # ten times as slow or as fast: clamped to 4 and 0.5
    assert factor_of(10 * C, 10 * P) == 4.0
    assert factor_of(C / 10, P / 10) == 0.5
    # one measurement 100 x too slow (a busy moment), the other as expected:
    # sqrt(100) = 10, clamped to 4
    assert factor_of(100 * C, P) == 4.0


def test_the_factor_is_measured_once_per_process_at_its_first_use(fake: list[str]) -> None:
    assert fake == []  # nothing measured until asked
    assert factor() == pytest.approx(2.0)
    assert factor() == pytest.approx(2.0)
    assert fake == ["cpsat", "python"]


def test_deterministic_mode_uses_1_and_measures_nothing(
        fake: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert factor(deterministic=True) == 1.0
    monkeypatch.setenv(speed.ENV, "2")
    assert factor(deterministic=True) == 1.0
    assert fake == []


def test_the_environment_overrides_the_measurement(
        fake: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # a positive number, clamped to [0.5, 4] (not rounded to the steps)
    for value, f in (("3", 3.0), ("1.0", 1.0), ("0.75", 0.75), ("10", 4.0), ("0.1", 0.5)):
        monkeypatch.setenv(speed.ENV, value)
        assert factor() == f
    assert fake == []
    # anything else is ignored: the factor is measured (2.0 here)
    for value in ("", "fast", "0", "-1", "nan", "inf"):
        monkeypatch.setenv(speed.ENV, value)
        assert factor() == pytest.approx(2.0)
    assert fake == ["cpsat", "python"]


def test_the_times_of_the_benchmark_machine_scale_with_the_factor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # factor 2.0: an LNS round's CP-SAT time 0.3 -> 0.6 s, its margin 0.03 -> 0.06 s,
    # the second lane's grace 0.02 -> 0.04 s, the least solve 0.05 -> 0.1 s, presolve
    # skipped below 1.5 -> 3 s, LNS's least time 0.15 -> 0.3 s; the whole model's build
    # per pair before any build 6 -> 12 us (speed 2.0), a whole LNS round 0.6 s
    monkeypatch.setenv(speed.ENV, "2")
    assert lns.round_s() == pytest.approx(0.6)
    assert lns.round_margin_s() == pytest.approx(0.06)
    assert lanes.grace_s() == pytest.approx(0.04)
    assert model.min_solve_s() == pytest.approx(0.1)
    assert model.presolve_off_below_s() == pytest.approx(3.0)
    assert cpsat.lns_min_s() == pytest.approx(0.3)
    r = portfolio.Rates()
    assert r.pair_s() == pytest.approx(12e-6) and r.speed == pytest.approx(2.0)
    assert r.round_s() == pytest.approx(0.6)
    # ... and in deterministic mode, whose times are deterministic times, not at all
    assert lns.round_s(deterministic=True) == 0.3
    assert model.min_solve_s(deterministic=True) == 0.05
    assert model.presolve_off_below_s(deterministic=True) == 1.5
    # a very slow build counts as at most 4 times the scaled prior: 20,000 pairs in
    # 1,000 s -> 48 us per pair, and the estimate moves halfway: (12 + 48) / 2 = 30 us
    r.measured_build(20_000, 1e3)
    assert r.build_pair_s == pytest.approx(30e-6)


def test_a_whole_lns_rounds_time_is_measured_and_smoothed() -> None:
    # factor 1 (the tests' setting): before any LNS run a round is its CP-SAT time,
    # 0.3 s, and LNS needing two whole rounds costs 0.6 s. Rounds of 1 s: (0.3 + 1) / 2
    # = 0.65 s; then rounds of 100 s count as 4 x 0.3 = 1.2: (0.65 + 1.2) / 2 = 0.925;
    # then rounds of 0 s count as 0.3 / 4 = 0.075: (0.925 + 0.075) / 2 = 0.5
    r = portfolio.Rates()
    pace = portfolio.Pace(1_000, rates=r)
    two = portfolio.Lns(Decision(), Decision(), Budget(1.0), workers=1, seed=0, whole=2)
    assert r.round_s() == pytest.approx(0.3) and two.estimate_s(pace) == pytest.approx(0.6)
    r.measured_rounds(1.0)
    assert r.lns_round_s == pytest.approx(0.65) and two.estimate_s(pace) == pytest.approx(1.3)
    r.measured_rounds(100.0)
    assert r.lns_round_s == pytest.approx(0.925)
    r.measured_rounds(0.0)
    assert r.lns_round_s == pytest.approx(0.5)


def test_ejection_takes_this_machines_speed_for_its_setup_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the priority swaps start only when the deadline leaves SETUP_S_PER_RUNNING per
    # running job times the speed factor: the ejection strategy passes it
    seen: dict[str, Any] = {}

    def spy(problem: Any, d: Decision, *a: Any, **k: Any) -> tuple[Decision, int]:
        seen.update(k)
        return d, 0

    monkeypatch.setenv(speed.ENV, "2")
    monkeypatch.setattr(portfolio, "eject", lambda problem, d, *a, **k: (d, 0))
    monkeypatch.setattr(portfolio, "upgrade", spy)
    portfolio.Eject(Decision()).run(None, Budget(1.0))  # type: ignore[arg-type]
    assert seen["speed"] == 2.0


def test_plans_measure_the_speed_once_and_deterministic_plans_never(fake: list[str]) -> None:
    data = generate(nodes=16, pending=6, seed=2)
    plan(data, deterministic=True)
    plan(data, time_limit_s=5.0, deterministic=True)
    assert fake == []
    plan(data, time_limit_s=0.5)
    plan(data, time_limit_s=0.5)
    assert fake == ["cpsat", "python"]


def test_the_fixed_overheads_and_margins_scale_with_the_factor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # factor 2.0: each solve's fixed overhead 0.02 -> 0.04 s and its least limit
    # 0.01 -> 0.02 s; the whole model's fixed build time 0.01 -> 0.02 s (so a build of
    # no pairs takes 0.02 s, and one measured takes 0.02 s off before the rate); the
    # reserve's margin 0.02 -> 0.04 s (0.02 in deterministic mode)
    monkeypatch.setenv(speed.ENV, "2")
    assert model.solve_overhead_s() == pytest.approx(0.04)
    assert model.least_phase_s() == pytest.approx(0.02)
    assert portfolio.build_fixed_s() == pytest.approx(0.02)
    assert portfolio.reserve_margin_s() == pytest.approx(0.04)
    assert portfolio.reserve_margin_s(deterministic=True) == 0.02
    r = portfolio.Rates()
    assert r.build_s(0) == pytest.approx(0.02)
    r.measured_build(20_000, 0.02 + 20_000 * 12e-6)  # exactly the prior rate after it
    assert r.build_pair_s == pytest.approx(12e-6)
    # the reserve of a plan of nothing pending: 5% of the budget and the margin
    nothing: Any = SimpleNamespace(pending={}, nodes=[], running={})
    assert r.reserve_s(nothing, 1.0) == pytest.approx(0.05 + 0.04)
    assert r.reserve_s(nothing, 1.0, deterministic=True) == pytest.approx(0.05 + 0.02)
    # and freeing what the tick built: 2 us per running job, pending job and node,
    # here 1,500 running jobs on 500 nodes (nothing pending: no pairs) 0.004 s, x 2
    idle: Any = SimpleNamespace(pending={}, nodes=[0] * 500, running=dict.fromkeys(range(1500)))
    assert r.reserve_s(idle, 1.0) == pytest.approx(0.05 + 0.04 + 0.008)
    assert r.reserve_s(idle, 1.0, deterministic=True) == pytest.approx(0.05 + 0.02 + 0.004)


def test_plan_gives_the_solver_at_least_its_least_time_scaled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a time limit shorter than preprocessing: solve_cpsat still gets LEAST_S (0.05 s)
    # times the factor, 0.1 s at 2.0; in deterministic mode the time limit as given
    import planner as planner_mod

    seen: list[float] = []
    real = cpsat.solve_cpsat

    def spy(problem: Any, *, time_limit_s: float, **k: Any) -> Any:
        seen.append(time_limit_s)
        return real(problem, time_limit_s=time_limit_s, **k)

    monkeypatch.setenv(speed.ENV, "2")
    monkeypatch.setattr(cpsat, "solve_cpsat", spy)
    monkeypatch.setattr(planner_mod, "OVER_S", 1e9)  # (no "took ... over" note)
    data = generate(nodes=8, pending=3, seed=1)
    plan(data, time_limit_s=1e-9)
    plan(data, time_limit_s=1e-3, deterministic=True)
    assert seen == [pytest.approx(0.1), 1e-3]


def test_a_long_lived_process_measures_again_when_the_measurement_is_old(
        fake: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # A service plans for days: warm_up() (every plan calls it) measures again once the
    # measurement is REMEASURE_S (300 s) old, never sooner, and never in
    # deterministic mode or before a first measurement
    import planner

    speed.refresh()
    assert fake == []  # nothing measured yet: nothing to drop
    assert planner.warm_up() == pytest.approx(2.0)
    assert fake == ["cpsat", "python"]
    assert planner.warm_up() == pytest.approx(2.0)  # fresh: kept
    now = speed._measured_at
    assert now is not None
    clock = SimpleNamespace(monotonic=lambda: now + 299.0, perf_counter=speed.time.perf_counter)
    monkeypatch.setattr(speed, "time", clock)
    assert planner.warm_up() == pytest.approx(2.0)
    assert fake == ["cpsat", "python"]  # 299 s old: kept
    planner.warm_up(deterministic=True)
    # (300 s and a millisecond: now + 300.0 - now can round to just under 300.0)
    clock.monotonic = lambda: now + 300.001
    planner.warm_up(deterministic=True)  # deterministic mode looks at no clock
    assert fake == ["cpsat", "python"]
    assert planner.warm_up() == pytest.approx(2.0)
    assert fake == ["cpsat", "python"] * 2  # 300 s old: measured again


def test_a_plans_own_problem_build_can_lower_its_factor(
        fake: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # BUILD_RUNNING_S 7.8 us per running job on the benchmark machine: 10,000
    # running jobs built in 0.078 s is factor 1.0; in 0.11 s, 0.11 / 0.078 = 1.41, the
    # step 2 ** (2/4) = 1.414; in 0.5 s, 6.4 -> 2 ** (11/4) = 6.73 clamped to 4, but
    # never above the measured factor (2.0 here). Builds under 0.059 s tell nothing
    # (None), nor does a process that has not measured yet, nor PREEMPT_PLANNER_SPEED.
    from planner.solver.speed import BUILD_RUNNING_S, for_call, from_build

    assert BUILD_RUNNING_S == 7.8e-6
    assert from_build(0.078, 10_000) is None  # nothing measured yet
    assert factor() == pytest.approx(2.0)
    assert from_build(0.078, 10_000) == pytest.approx(1.0)
    assert from_build(0.11, 10_000) == pytest.approx(2 ** 0.5)
    assert from_build(0.5, 10_000) == pytest.approx(2.0)
    assert from_build(0.058, 1_000) is None
    assert from_build(0.2, 0) is None
    # within a plan's block its factor holds, outside it the measured one;
    # deterministic mode and the environment come first
    with for_call(1.0):
        assert factor() == 1.0
        assert cpsat.first_least_s() == pytest.approx(0.1)
        assert factor(deterministic=True) == 1.0
        monkeypatch.setenv(speed.ENV, "3")
        assert factor() == 3.0
        assert from_build(0.18, 10_000) is None
        monkeypatch.delenv(speed.ENV)
    with for_call(None):
        assert factor() == pytest.approx(2.0)
    assert factor() == pytest.approx(2.0)
    assert fake == ["cpsat", "python"]


def test_work_of_the_builds_kind_takes_the_builds_factor_where_it_is_higher(
        fake: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # The measured factor 2.0; a build of 10,000 running jobs in 0.22 s says 0.22 / 0.078
    # = 2.82 -> 2 ** (6/4) = 2.83
    # (build_of, not capped by the measured factor), from_build keeps 2.0. Within a plan's block with both,
    # factor() is the plan's (2.0) and records_factor() the build's where higher
    # (2.83), the plan's where not (a build's 1.0); deterministic mode 1.0 and
    # PREEMPT_PLANNER_SPEED come first. The cut keep of a first greedy run scales
    # with it: 2.83 / 2.0 times as much
    from planner.solver.speed import build_of, for_call, from_build, records_factor

    assert factor() == pytest.approx(2.0)
    assert build_of(0.22, 10_000) == pytest.approx(2 ** 1.5)
    assert from_build(0.22, 10_000) == pytest.approx(2.0)
    assert build_of(0.058, 1_000) is None
    whole = Budget(10.0)
    with for_call(2.0, None):
        assert records_factor() == pytest.approx(2.0)
        keep = cpsat.cut_keep(whole, 1_000).keep_s(100, 10)
    with for_call(2.0, build_of(0.22, 10_000)):
        assert factor() == pytest.approx(2.0)
        assert records_factor() == pytest.approx(2 ** 1.5)
        assert records_factor(deterministic=True) == 1.0
        margin = cpsat.reserve_margin_s()
        assert cpsat.cut_keep(whole, 1_000).keep_s(100, 10) - margin == pytest.approx(
            (keep - margin) * 2 ** 1.5 / 2.0)
        monkeypatch.setenv(speed.ENV, "3")
        assert records_factor() == 3.0
        monkeypatch.delenv(speed.ENV)
    with for_call(2.0, 1.0):
        assert records_factor() == pytest.approx(2.0)
    assert records_factor() == pytest.approx(2.0)


def test_plan_takes_the_factor_of_its_own_cold_build(
        fake: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # plan() asks from_build for its factor after a cold build (none in deterministic
    # mode, nor after a loop's build from the last tick's problem) and CP-SAT's
    # whole call runs with it, and with what the build alone says (build_of) for
    # the work of the build's kind (records_factor)
    import planner

    asked: list[int] = []
    seen: list[float] = []
    records: list[float] = []

    def from_build(build_s: float, running: int) -> float:
        asked.append(running)
        return 0.5

    solve = cpsat.solve_cpsat

    def spy(*a: Any, **kw: Any) -> Any:
        seen.append(factor(kw.get("deterministic", False)))
        records.append(speed.records_factor(kw.get("deterministic", False)))
        return solve(*a, **kw)

    monkeypatch.setattr(speed, "from_build", from_build)
    monkeypatch.setattr(speed, "build_of", lambda build_s, running: 3.0)
    monkeypatch.setattr(cpsat, "solve_cpsat", spy)
    data = generate(nodes=4, pending=3, seed=1)
    plan(data, time_limit_s=0.5)
    assert asked == [sum(1 for j in data["jobs"] if j["state"] == "running")]
    assert seen == [0.5] and factor() == pytest.approx(2.0)
    assert records == [3.0] and speed.records_factor() == pytest.approx(2.0)
    plan(data, time_limit_s=0.5, deterministic=True)
    assert len(asked) == 1 and seen[-1] == 1.0
    loop = planner.Loop()
    loop.plan(data, time_limit_s=0.5)
    loop.plan(data, time_limit_s=0.5)  # (built from the last tick's problem)
    assert len(asked) == 2 and seen[-2:] == [0.5, 2.0]
