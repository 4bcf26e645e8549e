"""``preempt-planner tune`` on tiny traces whose best policy is known by reasoning.

Both stories run on ``tests/data/tune/cluster-56.yaml`` (56 GPUs) with the greedy
planner, whose plans follow the cross-tick rules and are deterministic; 60 s ticks.

**Budget** (``burst.jsonl``, ``budget-space.yaml``): at 00:00 56 tier-3 jobs of 8 h
fill the cluster; at 01:00, once their 30 min immunity is over, 6 tier-2 jobs of 8 h
arrive and may evict at once (patience 0). The rolling budget is ``B =
thrash.min_evictions`` per hour (no share of the running jobs, no GPU budget). About
56 jobs are active all along, so an hour with 3 or more evictions is a thrash alert
(> 5% of 56 = 2.8) and one with 2 is not. With budget B the burst evicts B jobs at
01:00, B more at 02:01 (the first ones leave the window after 3,600 s: the next tick
after 02:00), ...: the last tier-2 job waits ``(ceil(6 / B) - 1) x 3,660 s``.

    B   alert windows          longest tier-2 wait
    1   0                      5 x 3,660 = 18,300 s
    2   0                      2 x 3,660 =  7,320 s
    3   2 (3 + 3)              3,660 s
    4   1 (4, then 2)          3,660 s
    6   1 (6)                  0 (the victims' flush, 0.06 s)

So on (alerts, longest wait) the front is {B=2, B=6}: B=2 is the one budget that
keeps the burst under the alert with the least wait, B=6 the one without a wait.

**Patience** (``patience.jsonl``, ``patience-space.yaml``): the same cluster and
burst, no rolling budget, but 6 of the tier-3 jobs end at 01:20:30. A tier-2 job
with patience P may evict at 01:00 + P: P = 0, 600 and 1200 s evict 6 jobs (before
01:20:30); P = 1800 s waits until the 6 GPUs come free at 01:20:30 and starts at the
next tick, 01:21, evicting nothing: a patience that removes every eviction.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

import cli
from planner.tune.search import dominates

DATA = Path(__file__).parent / "data" / "tune"
CLUSTER = str(DATA / "cluster-56.yaml")
BURST = str(DATA / "burst.jsonl")
PATIENCE = str(DATA / "patience.jsonl")
BUDGET_SPACE = str(DATA / "budget-space.yaml")
PATIENCE_SPACE = str(DATA / "patience-space.yaml")
HOUR = 3660.0  # a rolling hour and the tick after it
FLUSH = 0.06  # six 1 GB checkpoints at 100 GB/s, written at once


def tune(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str,
         out: str = "out", trace: str = BURST, space: str = BUDGET_SPACE) -> dict:
    args = ["tune", "--cluster", CLUSTER, "--trace", trace, "--space", space,
            "--planner", "greedy", "--days", "0.5", "--out", str(tmp_path / out),
            "-o", "json", *extra]
    capsys.readouterr()
    assert cli.main(args) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def by_trial(rec: dict) -> dict[str, dict]:
    return {t["trial"]: t for t in rec["trials"]}


def assert_front_is_pareto(rec: dict) -> None:
    """No point of the front dominates another, and every complete trial that meets
    the constraints and is not on the front is dominated by a point of the front."""
    names = [o["name"] for o in rec["objectives"]]
    trials = by_trial(rec)
    front = [[trials[n]["values"][k] for k in names] for n in rec["front"]]
    for i, a in enumerate(front):
        assert not any(dominates(b, a) for j, b in enumerate(front) if j != i)
    for t in rec["trials"]:
        if t["state"] == "complete" and t["trial"] not in rec["front"] and t.get("feasible", True):
            v = [t["values"][k] for k in names]
            assert any(dominates(f, v) for f in front), t["trial"]


def test_budget_grid_finds_the_only_budget_that_keeps_the_burst_under_the_alert(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tune(tmp_path, capsys, "--objective", "thrash,t2_max")
    assert rec["settings"]["search"] == "grid"
    t = by_trial(rec)
    assert [t[f"#{k}"]["params"]["thrash.min_evictions"] for k in range(1, 6)] == [1, 2, 3, 4, 6]
    assert [t[f"#{k}"]["values"]["thrash"] for k in range(1, 6)] == [0, 0, 2, 1, 1]
    waits = [t[f"#{k}"]["values"]["t2_max"] for k in range(1, 6)]
    assert waits == pytest.approx([5 * HOUR, 2 * HOUR, HOUR, HOUR, 0.0], abs=0.1)
    assert rec["front"] == ["#2", "#5"]
    assert_front_is_pareto(rec)
    # the default policy (B = max(4, 3% of 56) = 4, GPU budget 32, patience 600 s): 4
    # evictions at 01:10, 2 at 02:11; naive evicts 6 at once
    assert rec["references"]["default"]["values"] == pytest.approx(
        {"thrash": 1, "t2_max": 600 + HOUR}, abs=0.1)
    assert rec["references"]["naive"]["values"] == pytest.approx({"thrash": 1, "t2_max": 0},
                                                                 abs=0.1)
    # "no thrash alert" as a constraint: the chosen policy is B = 2 (from the cache)
    rec = tune(tmp_path, capsys, "--objective", "thrash,t2_max", "--constraint", "thrash<=0")
    assert rec["simulations"]["run"] == 0 and rec["simulations"]["cached"] == 7
    assert rec["front"] == ["#2"]
    assert rec["chosen"]["params"] == {"thrash.min_evictions": 2}
    assert [x["trial"] for x in rec["trials"] if x.get("feasible")] == ["#1", "#2"]
    assert_front_is_pareto(rec)


def test_patience_grid_finds_the_patience_that_removes_every_eviction(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tune(tmp_path, capsys, "--objective", "evictions,t2_max", "--constraint",
               "evictions<=0", trace=PATIENCE, space=PATIENCE_SPACE)
    t = by_trial(rec)
    # 62 jobs complete within the 12 h; 6 evictions each for P = 0, 600, 1200
    assert [t[f"#{k}"]["values"]["evictions"] for k in range(1, 5)] == pytest.approx(
        [6 / 62, 6 / 62, 6 / 62, 0.0])
    assert [t[f"#{k}"]["values"]["t2_max"] for k in range(1, 5)] == pytest.approx(
        [FLUSH, 600 + FLUSH, 1200 + FLUSH, 1260.0], abs=0.01)
    assert rec["front"] == ["#4"]
    assert rec["chosen"]["params"] == {"tiers.2.preempt_after_s": 1800}
    assert rec["chosen"]["values"]["evictions"] == 0
    assert_front_is_pareto(rec)
    # the chosen policy file is ready to use: the same run gives the same outcome
    policy = tmp_path / "out" / "policy.yaml"
    capsys.readouterr()
    assert cli.main(["simulate", "--cluster", CLUSTER, "--trace", PATIENCE, "--planner",
                     "greedy", "--days", "0.5", "--policy", str(policy), "-o", "json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert (m["evictions"], m["queue_delay_s"]["2"]["max"]) == (0, 1260.0)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| #4 (chosen) | 1800 | 0.000 | 21.0 min |" in report
    assert "## Chosen: #4" in report and "### Per window" in report


def test_pruning_skips_the_later_windows_of_dominated_trials(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two windows (the same story on two days): after the first, B = 1 is dominated
    by B = 2, and B = 3 and B = 4 by B = 6; only B = 2 and B = 6 run the second day."""
    rec = tune(tmp_path, capsys, "--objective", "thrash,t2_max", "--windows",
               "2026-01-05,2026-01-06T00:00:00Z:0.5", "--batch", "5")
    t = by_trial(rec)
    assert [x["trial"] for x in rec["trials"] if x["state"] == "pruned"] == ["#1", "#3", "#4"]
    assert {t[n]["pruned_after"] for n in ("#1", "#3", "#4")} == {"2026-01-05"}
    # 2 references x 2 windows + 5 trials x window 1 + 2 trials x window 2
    assert rec["simulations"]["run"] == 11
    assert rec["front"] == ["#2", "#5"]
    assert [c["window"] for c in t["#2"]["cells"]] == ["2026-01-05", "2026-01-06T00:00:00Z"]
    assert t["#2"]["values"] == pytest.approx({"thrash": 0, "t2_max": 2 * HOUR}, abs=0.1)
    assert len(t["#3"]["cells"]) == 1


def test_the_cache_runs_only_what_is_new(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    first = tune(tmp_path, capsys, "--objective", "thrash,t2_max")
    assert first["simulations"] == {"run": 7, "cached": 0, "failed": 0,
                                    "runs": first["simulations"]["runs"]}
    again = tune(tmp_path, capsys, "--objective", "thrash,t2_max")
    assert (again["simulations"]["run"], again["simulations"]["cached"]) == (0, 7)
    assert again["trials"] == first["trials"] and again["front"] == first["front"]
    more = tune(tmp_path, capsys, "--objective", "thrash,t2_max", "--seeds", "0,1")
    assert (more["simulations"]["run"], more["simulations"]["cached"]) == (7, 7)
    assert {r["seed"] for r in more["simulations"]["runs"]} == {1}
    # a cache shared by another output folder
    other = tune(tmp_path, capsys, "--objective", "thrash,t2_max", "--cache",
                 str(tmp_path / "out" / "cache"), out="other")
    assert other["simulations"]["run"] == 0


def test_optuna_finds_the_budget_in_a_continuous_range(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """B = floor(max_fraction x running jobs) with ~56 running: max_fraction in
    [2/56, 3/56) is B = 2, the only budget with no alert and a 2-hour wait; TPE
    proposes it within 16 trials (the sampler is seeded: the same trials every run)."""
    space = tmp_path / "space.yaml"
    space.write_text("params:\n  thrash.max_fraction: {low: 0.0, high: 0.12}\n"
                     "fixed:\n  thrash.min_evictions: 0\n  thrash.max_gpu_fraction: null\n"
                     "  tiers.2.preempt_after_s: 0\n")
    rec = tune(tmp_path, capsys, "--objective", "thrash,t2_max", "--constraint", "thrash<=0",
               "--trials", "16", space=str(space))
    assert rec["settings"]["search"] == "optuna" and len(rec["trials"]) == 16
    assert rec["chosen"]["values"] == pytest.approx({"thrash": 0, "t2_max": 2 * HOUR}, abs=0.1)
    assert 2 / 56 <= rec["chosen"]["params"]["thrash.max_fraction"] < 3 / 56
    assert_front_is_pareto(rec)
    again = tune(tmp_path, capsys, "--objective", "thrash,t2_max", "--constraint", "thrash<=0",
                 "--trials", "16", space=str(space))
    assert again["simulations"]["run"] == 0
    assert [x["params"] for x in again["trials"]] == [x["params"] for x in rec["trials"]]


def test_outputs_chart_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli.main(["tune", "--cluster", CLUSTER, "--trace", BURST, "--space", BUDGET_SPACE,
                     "--planner", "greedy", "--days", "0.5", "--objective", "thrash,t2_max",
                     "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "Pareto front (2 of 5 trials" in out and "#2 (chosen)" in out
    files = {p.name for p in (tmp_path / "o").iterdir()}
    assert {"report.md", "front.json", "policy.yaml", "cache"} <= files
    pytest.importorskip("matplotlib")
    assert (tmp_path / "o" / "front.png").stat().st_size > 5000


def test_no_matplotlib_skips_the_chart_with_a_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rec = tune(tmp_path, capsys, "--objective", "thrash,t2_max")
    assert rec["front"] == ["#2", "#5"]
    assert not (tmp_path / "out" / "front.png").exists()
    assert "matplotlib is not installed" in (tmp_path / "out" / "report.md").read_text()


def test_progress_on_a_terminal_and_none_with_quiet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    import planner.commands._common as common
    import planner.commands.tune as tune_cmd

    text = io.StringIO()
    fake = Console(file=text, force_terminal=True, width=300, soft_wrap=True, highlight=False)
    for module in (common, tune_cmd):
        monkeypatch.setattr(module, "err_console", fake)
    args = ["tune", "--cluster", CLUSTER, "--trace", BURST, "--space", BUDGET_SPACE,
            "--planner", "greedy", "--days", "0.5", "--objective", "thrash,t2_max",
            "--out", str(tmp_path / "p"), "-o", "json"]
    assert cli.main(args) == 0
    said = text.getvalue()
    assert "tuning: a grid of 5 point(s) x 1 simulation(s) each" in said
    assert "trials 5/5 done" in said and "best so far #2 (thrash 0, t2_max 2.0 h; front 2)" \
        in said
    text.truncate(0)
    text.seek(0)
    assert cli.main([*args, "--quiet"]) == 0
    assert text.getvalue() == ""
    capsys.readouterr()


@pytest.mark.parametrize(("args", "message"), [
    (["--objective", "wasted,thrash=x"], "--objective 'thrash=x': the weight must be a number"),
    (["--objective", "waste"], "--objective 'waste': unknown (known: wasted, thrash"),
    (["--constraint", "t1_p95<=lots"], "--constraint 't1_p95<=lots': expected NAME<=NUMBER"),
    (["--loads", "1,0"], "--loads: '0' must be a positive number"),
    (["--seeds", "0,0"], "--seeds: '0' is given twice"),
    (["--windows", "yesterday"], "'yesterday' is neither epoch seconds nor an ISO-8601 time"),
    (["--search", "grid", "--space", "CONTINUOUS"], "--search grid: the space has a continuous"),
    (["--space", "BADKEY"], "params.thrash.max_fractoin = 0.1: --set policy.thrash.max_fractoin"),
    (["--space", "BADRANGE"], "params.grace.min_s: low 90 is more than high 30"),
    # (each was an internal error or a hang: a grid listed whole to count it, a step
    # count of infinity, a float of 400 digits)
    (["--search", "grid", "--space", "HUGEGRID"], ("--search grid: the space has "
                                                   "100,000,000,000,001 points, more than a "
                                                   "grid's 100,000")),
    (["--space", "TINYSTEP"], ("params.thrash.max_fraction.step: 1e-300 makes more than 10^15 "
                               "values from 0 to 1")),
    (["--space", "HUGEHIGH"], ("params.thrash.max_fraction.high: expected a number from -10^15 "
                               "to 10^15")),
    (["--space", "BIGINT"], "params.thrash.min_evictions.high: expected a number from -10^15"),
    (["--trace", "-"], "--trace -: tune reads its files again in every worker"),
    (["--windows", "2026-01-05,2027-01-01"], "window 2027-01-01: trace: no job in the simulated"),
    (["--windows", "2026-01-05", "--start", "2026-01-05"], "--start: with --windows, each window"),
])
def test_bad_input_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     args: list[str], message: str) -> None:
    spaces = {"CONTINUOUS": "params: {thrash.max_fraction: {low: 0.0, high: 0.1}}\n",
              "BADKEY": "params: {thrash.max_fractoin: [0.1, 0.2]}\n",
              "BADRANGE": "params: {grace.min_s: {low: 90, high: 30}}\n",
              "HUGEGRID": "params: {thrash.min_evictions: {low: 0, high: 100000000000000}}\n",
              "TINYSTEP": "params: {thrash.max_fraction: {low: 0, high: 1, step: 1.0e-300}}\n",
              "HUGEHIGH": ("params: {thrash.max_fraction: {low: 0, high: 1.0e+300, "
                           "step: 1.0e-300}}\n"),
              "BIGINT": "params: {thrash.min_evictions: {low: 0, high: " + "9" * 400 + "}}\n"}
    base = {"--cluster": CLUSTER, "--trace": BURST, "--space": BUDGET_SPACE,
            "--out": str(tmp_path / "o")}
    extra = []
    for k in range(0, len(args), 2):
        value = args[k + 1]
        if value in spaces:
            (tmp_path / "s.yaml").write_text(spaces[value])
            value = str(tmp_path / "s.yaml")
        if args[k] in base:
            base[args[k]] = value
        else:
            extra += [args[k], value]
    argv = ["tune", *[x for kv in base.items() for x in kv], "--planner", "greedy", "--days",
            "0.5", *extra]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_missing_optuna_and_ray_name_their_extras(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("params: {thrash.max_fraction: {low: 0.0, high: 0.1}}\n")
    monkeypatch.setitem(sys.modules, "optuna", None)
    monkeypatch.setitem(sys.modules, "ray", None)
    base = ["tune", "--cluster", CLUSTER, "--trace", BURST, "--planner", "greedy",
            "--out", str(tmp_path / "o")]
    assert cli.main([*base, "--space", str(space)]) == 2
    err = capsys.readouterr().err
    assert "is searched with Optuna, which is not installed (pip install " \
           "'preempt-planner[tune]')" in err
    assert cli.main([*base, "--space", BUDGET_SPACE, "--ray", "auto"]) == 2
    assert "--ray: Ray is not installed (pip install 'preempt-planner[ray]')" in \
        capsys.readouterr().err
    assert cli.main(["compare", "--cluster", CLUSTER, "--trace", BURST, "--planners", "naive",
                     "--ray", "auto", "--out", str(tmp_path / "c")]) == 2
    assert "preempt-planner[ray]" in capsys.readouterr().err
    # a grid needs no Optuna
    assert cli.main([*base, "--space", BUDGET_SPACE, "--days", "0.5", "-o", "json"]) == 0


def test_ray_address_where_nothing_answers_is_bad_input_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'preempt-planner[ray]')")
    from ray_cluster import free_ports

    address = f"127.0.0.1:{free_ports(1)[0]}"  # (Ray would try for minutes)
    assert cli.main(["tune", "--cluster", CLUSTER, "--trace", BURST, "--space", BUDGET_SPACE,
                     "--planner", "greedy", "--days", "0.5", "--out", str(tmp_path / "o"),
                     "--ray", address]) == 2
    assert f"--ray {address}: no Ray head node answers there" in capsys.readouterr().err
    assert cli.main(["compare", "--cluster", CLUSTER, "--trace", BURST, "--planners", "naive",
                     "--ray", "head-node", "--out", str(tmp_path / "c")]) == 2
    assert "--ray head-node: expected HOST:PORT" in capsys.readouterr().err


def _die_once(marker: str) -> int:
    """A worker process that dies the first time it runs (as if killed)."""
    if not os.path.exists(marker):
        Path(marker).write_text("died")
        os._exit(9)
    return 42


def test_local_backend_runs_again_what_a_dead_worker_had(tmp_path: Path) -> None:
    from planner.tune.backends import LocalBackend, run_all

    backend = LocalBackend(2)
    try:
        got = dict(run_all(backend, _die_once, [str(tmp_path / "m")] * 3))
    finally:
        backend.close()
    assert got == {0: 42, 1: 42, 2: 42}


def test_space_grid_and_windows() -> None:
    from planner.tune.search import window_list
    from planner.tune.space import load_space, parse_constraints

    space = load_space({"params": {"a.b": [1, 2], "c": {"low": 0, "high": 10, "step": 5},
                                   "d": {"low": 0.5, "high": 1.0, "step": 0.25}}})
    assert space.grid_size() == 18
    assert space.grid()[:2] == [{"a.b": 1, "c": 0, "d": 0.5}, {"a.b": 1, "c": 0, "d": 0.75}]
    assert load_space({"params": {"x": {"low": 0.0, "high": 1.0}}}).grid_size() is None
    # counted, never listed (a grid of 10^14 points was a MemoryError)
    big = load_space({"params": {"x": {"low": 0, "high": 10**14},
                                 "y": {"low": 0.0, "high": 1.0, "step": 1e-12}}})
    assert big.grid_size() == (10**14 + 1) * (10**12 + 1)
    ws = window_list("2017-10-04,2017-10-11:3,1507680000", None, 2.0)
    assert [(w.label, w.days) for w in ws] == [("2017-10-04", 2.0), ("2017-10-11", 3.0),
                                             ("1507680000", 2.0)]
    assert ws[0].start == 1507075200.0
    c = parse_constraints(["t1_p95<=1.1*naive", "t2_p95 <= 2x default", "thrash<=0",
                           "wasted<=default"])
    assert [(x.name, x.bound, x.ref) for x in c] == [
        ("t1_p95", 1.1, "naive"), ("t2_p95", 2.0, "default"), ("thrash", 0.0, None),
        ("wasted", 1.0, "default")]
    refs = {"naive": {"t1_p95": 100.0}}
    assert c[0].violation(110.0, refs) <= 0 < c[0].violation(110.1, refs)
