"""``simulate`` and ``compare`` commands, Prometheus exposition, reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import cli
from models import load_snapshot
from planner.sim import report
from planner.sim.naive import plan_naive
from planner.sim.prom import plan_metrics, run_metrics

DATA = Path(__file__).parent / "data" / "sim"
CLUSTER = str(DATA / "cluster-1node.json")
PING_PONG = str(DATA / "ping-pong.jsonl")   # the ping-pong story of test_sim_engine.py


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_simulate_json_and_metrics_file(tmp_path, capsys):
    prom = tmp_path / "run.prom"
    rc = cli.main(["simulate", "--cluster", CLUSTER, "--trace", PING_PONG, "--planner", "naive",
                   "--format", "json", "--metrics-out", str(prom), "--no-progress"])
    assert rc == 0
    m = json.loads(capsys.readouterr().out)
    assert (m["evictions"], m["completed"], m["max_consecutive_preemptions"]) == (6, 7, 6)
    fam = families(prom.read_text())
    assert fam["preempt_sim_evictions"][0].value == 6
    assert fam["preempt_sim_completions"][0].value == 7
    assert fam["preempt_sim_thrash_alert"][0].value == 1
    causes = {s.labels["cause"]: s.value for s in fam["preempt_sim_wasted_gpu_seconds"]
              if s.name.endswith("_total")}
    # six flushes of 0.008 s on 8 GPUs (each victim exits when its flush ends)
    assert causes == {"lost": 0.0, "restore": 0.0, "flush": pytest.approx(6 * 0.008 * 8)}


def test_simulate_cpsat_table_out(tmp_path):
    out = tmp_path / "table.txt"
    rc = cli.main(["simulate", "--cluster", CLUSTER, "--trace", PING_PONG, "--planner", "cpsat",
                   "--deterministic", "--out", str(out), "--no-progress"])
    assert rc == 0
    text = out.read_text()
    assert "simulation: cpsat" in text and "most consecutive preemptions" in text


def test_simulate_bad_input_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "submit": 0, "duration_s": 5, "gpus_per_node": 1, "tier": 7}\n')
    rc = cli.main(["simulate", "--cluster", CLUSTER, "--trace", str(bad), "--planner", "naive",
                   "--no-progress"])
    assert rc == 2
    assert "tier(s) [7] not in the policy" in capsys.readouterr().err
    rc = cli.main(["simulate", "--cluster", CLUSTER, "--trace", "nope.csv", "--no-progress"])
    assert rc == 2


def test_compare_two_processes_report(tmp_path, capsys, monkeypatch):
    out = tmp_path / "rep"
    rc = cli.main(["compare", "--cluster", CLUSTER, "--trace", PING_PONG,
                   "--planners", "naive,cpsat", "--deterministic", "--out", str(out),
                   "--format", "json"])
    assert rc == 0
    metrics = json.loads(capsys.readouterr().out)
    assert [m["label"] for m in metrics] == ["naive", "cpsat"]
    assert [m["evictions"] for m in metrics] == [6, 2]
    md = (out / "report.md").read_text()
    assert "| evictions | 6 | 2 |" in md
    if report.have_matplotlib():
        for name in ("over_time.png", "wasted_by_cause.png", "wait_cdf.png"):
            assert (out / name).stat().st_size > 1000
            assert f"({name})" in md
    # without matplotlib: Markdown only, with a clear note
    monkeypatch.setattr(report, "have_matplotlib", lambda: False)
    out2 = tmp_path / "rep2"
    rc = cli.main(["compare", "--cluster", CLUSTER, "--trace", PING_PONG, "--planners", "naive",
                   "--out", str(out2), "--jobs", "1"])
    assert rc == 0
    md = (out2 / "report.md").read_text()
    assert "matplotlib is not installed" in md and ".png" not in md
    assert "matplotlib is not installed" in capsys.readouterr().err


def test_compare_rejects_unknown_planner():
    assert cli.main(["compare", "--cluster", CLUSTER, "--trace", PING_PONG,
                     "--planners", "cpsat,fifo"]) == 2


def test_plan_metrics_exposition():
    snap = load_snapshot({
        "version": 1, "now": "2026-01-05T00:00:00Z", "storage": [{"id": "nfs", "write_gb_per_s": 10.0}],
        "nodes": [{"id": "n0", "gpus": 8}],
        "jobs": [{"id": "low", "tier": 3, "state": "running", "gpus_per_node": 8,
                  "started_at": "2026-01-04T00:00:00Z",
                  "placement": [{"node": "n0", "gpus": list(range(8))}],
                  "checkpoint": {"size_gb": 20.0, "restore_s": 100}},
                 {"id": "high", "tier": 1, "state": "pending", "gpus_per_node": 8},
                 {"id": "other", "tier": 2, "state": "pending", "gpus_per_node": 8}]})
    plan = plan_naive(snap)
    fam = families(plan_metrics(plan, snap))
    assert fam["preempt_plan_evictions"][0].value == 1
    assert fam["preempt_plan_placements"][0].value == 1
    # cost = 8 GPUs * (restore 100 s + solo flush 20 GB / 10 GB/s)
    assert fam["preempt_plan_wasted_gpu_seconds"][0].value == 8 * (100 + 2)
    storm = {s.name: s.value for s in fam["preempt_plan_storm_flush_gb"]}
    assert storm == {"preempt_plan_storm_flush_gb": 20.0}
    assert fam["preempt_plan_eviction_rate_ratio"][0].value == 1.0   # 1 of 1 running job
    assert fam["preempt_plan_thrash_alert"][0].value == 1
    assert {s.labels["reason"]: s.value for s in fam["preempt_plan_deferred"]} == {"OUTRANKED": 1}
    # without a snapshot the rate is unknown (NaN) and no alert is raised
    fam = families(plan_metrics(plan))
    assert fam["preempt_plan_thrash_alert"][0].value == 0


def test_run_metrics_text_has_per_tier_delays():
    from planner.sim.engine import SimConfig, simulate
    from planner.sim.metrics import compute_metrics
    from planner.sim.traces import load_jsonl

    res = simulate(load_snapshot(CLUSTER), load_jsonl(PING_PONG), SimConfig(planner="naive"))
    fam = families(run_metrics(compute_metrics(res)))
    tiers = {(s.labels["tier"], s.labels["quantile"]) for s in fam["preempt_sim_queue_delay_seconds"]}
    assert ("2", "95") in tiers and ("3", "50") in tiers


@pytest.mark.parametrize("value, text", [(None, "-"), (0.25, "25.0%")])
def test_report_formatting(value, text):
    assert report._pct(value) == text


def test_simulate_refuses_meaningless_numbers_before_running(capsys):
    # Every number of the run by its option, all at once, exit 2; before, a tick of
    # -5 s or a time limit of 0 ran (the planner returning its greedy fallback).
    rc = cli.main(["simulate", "--cluster", CLUSTER, "--trace", PING_PONG, "--no-progress",
                   "--tick", "-5", "--days", "nan", "--time-limit", "0", "--workers", "0"])
    assert rc == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("invalid input (4 problem(s)) - --tick: must be a positive number, got -5 "
            "- --days: must be a positive number, got nan "
            "- --time-limit: must be a positive number, got 0 "
            "- --workers: must be at least 1, got 0") in err, err


def test_simulate_set_and_compare_variants_switch_the_cross_tick_rules(tmp_path, capsys):
    # The cpsat ping-pong evicts X twice (test_sim_engine.py). --set and --variant
    # change the policy of a run: with thrash.min_evictions 1 the budget per hour is
    # still 1 (one running job): the same two evictions; a variant with a misspelt
    # key is bad input before any run. compare --variant runs every planner with the
    # unchanged policy (label planner@default) and with the variant (planner@NAME).
    rc = cli.main(["simulate", "--cluster", CLUSTER, "--trace", PING_PONG, "--planner", "greedy",
                   "--set", "thrash.min_evictions=1", "--set", "tiers.2.preempt_after_s=0",
                   "--format", "json", "--no-progress"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["evictions"] == 2
    rc = cli.main(["simulate", "--cluster", CLUSTER, "--trace", PING_PONG, "--set",
                   "thrash.windw_s=60", "--no-progress"])
    assert rc == 2 and "unknown key 'windw_s' at policy.thrash" in capsys.readouterr().err
    out = tmp_path / "cmp"
    rc = cli.main(["compare", "--cluster", CLUSTER, "--trace", PING_PONG, "--planners", "greedy",
                   "--variant", "off:thrash=null,thrash=null,spare_ending_within_s=0",
                   "--variant", "strict:thrash.exempt_tiers=[],thrash.min_evictions=0",
                   "--out", str(out), "--format", "json", "--jobs", "1"])
    assert rc == 0
    runs = {m["label"]: m for m in json.loads(capsys.readouterr().out)}
    assert sorted(runs) == ["greedy@default", "greedy@off", "greedy@strict"]
    assert runs["greedy@off"]["evictions"] == runs["greedy@default"]["evictions"] == 2
    # min_evictions 0 and 5% of one running job: B = 0, no eviction at all
    assert runs["greedy@strict"]["evictions"] == 0
    rc = cli.main(["compare", "--cluster", CLUSTER, "--trace", PING_PONG, "--planners", "greedy",
                   "--variant", "bad:thrash.nope=1", "--out", str(tmp_path / "c2")])
    assert rc == 2 and "unknown key 'nope'" in capsys.readouterr().err


def test_simulate_dump_ticks_writes_each_call_replayable(tmp_path, capsys):
    from models import Plan
    from planner.checks.verify import verify

    dump, record = tmp_path / "ticks", tmp_path / "run.json"
    rc = cli.main(["simulate", "--cluster", CLUSTER, "--trace", PING_PONG, "--planner", "cpsat",
                   "--deterministic", "--dump-ticks", str(dump), "--result-out", str(record),
                   "--format", "json", "--no-progress"])
    assert rc == 0
    m = json.loads(capsys.readouterr().out)
    calls = json.loads(record.read_text())["planner_calls"]
    lines = [json.loads(x) for x in (dump / "ticks.jsonl").read_text().splitlines()]
    assert [x["tick"] for x in lines] == list(range(1, calls + 1))
    assert len(list(dump.glob("tick-*.json"))) == len(list(dump.glob("plan-*.json"))) == calls
    # the index adds up to the run: every eviction the simulator carried out was planned
    assert sum(x["evictions"] for x in lines) == m["evictions"]
    # the first call sees the trace's first arrival (ping-pong.jsonl: submit 0 = 2026-01-05)
    assert lines[0]["now"] == "2026-01-05T00:00:00Z"
    for k in (1, calls):  # a dumped tick is a contract snapshot its plan verifies against
        snap = load_snapshot(dump / f"tick-{k:06d}.json")
        plan = Plan.model_validate_json((dump / f"plan-{k:06d}.json").read_text())
        assert verify(snap, plan) == []
    # a second run into the same folder is refused before anything is written
    before = (dump / "ticks.jsonl").read_text()
    rc = cli.main(["simulate", "--cluster", CLUSTER, "--trace", PING_PONG, "--planner", "naive",
                   "--dump-ticks", str(dump), "--no-progress"])
    assert rc == 2
    assert "--dump-ticks" in capsys.readouterr().err
    assert (dump / "ticks.jsonl").read_text() == before
