"""Trace loaders and the seeded synthesis rules (``planner/sim/traces.py``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from models import InputError
from planner.sim.cluster import generate_cluster, load_cluster
from planner.sim.traces import (
    TraceJob,
    detect_format,
    load_jsonl,
    load_openb,
    load_philly,
    load_trace,
    parse_tier_rule,
    shared_traces_dir,
    slice_trace,
    team_tier,
    write_jsonl,
)

DATA = Path(__file__).parent / "data" / "sim"


def test_philly_slice_fields_and_rules():
    jobs = load_philly(DATA / "philly-slice.csv")
    assert len(jobs) == 34
    first = jobs[0]
    # 2017-10-04 09:01:55 UTC, 73 s, 1 GPU, team 11cb48
    assert first.submit == datetime(2017, 10, 4, 9, 1, 55, tzinfo=UTC).timestamp()
    assert (first.duration_s, first.gpus, first.team) == (73.0, 1, "11cb48")
    big = next(j for j in jobs if j.gpus == 32)
    assert (big.gpus_per_node, big.nodes) == (8, 4)          # 32 GPUs = 4 nodes x 8
    for j in jobs:
        assert 2.0 * j.gpus <= j.checkpoint_gb <= 10.0 * j.gpus
        assert j.checkpoint_interval_s in (900.0, 1800.0, 3600.0)
        assert j.restore_s == pytest.approx(60 + j.checkpoint_gb / 2, abs=0.05)
        assert j.signal in ("SIGTERM", None)
        assert (j.barrier_s, j.cleanup_s) == (10.0, 5.0)
        assert j.tier == team_tier(j.team, 0)
        # time limit: (run time + restore) x 4 ** u, 1x to 4x, rounded up to 15 min
        run = j.duration_s + j.restore_s
        assert run <= j.time_limit_s <= 4 * run + 900 and j.time_limit_s % 900 == 0
    # the first job: 73 s + restore; any factor in [1, 4) rounds up to 900 s
    assert first.time_limit_s == 900


def test_tier_rules(tmp_path):
    # gpus:16,2: >= 16 GPUs tier 1, >= 2 tier 2, else 3; duration:600,7200: under
    # 600 s tier 1, under 7200 s tier 2, else 3; map: the file's teams, others 3
    jobs = {j.id: j for j in load_philly(DATA / "philly-slice.csv")}
    by_gpus = load_philly(DATA / "philly-slice.csv", tier_rule=parse_tier_rule("gpus"))
    for j in by_gpus:
        assert j.tier == (1 if j.gpus >= 16 else 2 if j.gpus >= 2 else 3)
    assert {j.tier for j in by_gpus} == {1, 2, 3}
    by_dur = load_philly(DATA / "philly-slice.csv",
                         tier_rule=parse_tier_rule("duration:600,7200"))
    for j in by_dur:
        assert j.tier == (1 if j.duration_s < 600 else 2 if j.duration_s < 7200 else 3)
    mapping = tmp_path / "tiers.yaml"
    mapping.write_text("teams: {11cb48: 1, 103959: 2}\ndefault: 3\n")
    by_map = load_philly(DATA / "philly-slice.csv", tier_rule=parse_tier_rule(f"map:{mapping}"))
    for j in by_map:
        assert j.tier == {"11cb48": 1, "103959": 2}.get(j.team, 3)
        assert j.checkpoint_gb == jobs[j.id].checkpoint_gb  # only the tier changes
    for bad, said in (("gpus:2,16", "A >= B"), ("duration:x,1", "two numbers"),
                      ("size", "expected team, gpus"), ("map:/nope.yaml", "cannot read")):
        with pytest.raises(InputError) as exc:
            parse_tier_rule(bad)
        assert said in str(exc.value), bad


def test_synthesis_is_seeded_and_independent_of_the_slice():
    a = load_philly(DATA / "philly-slice.csv", seed=0)
    b = load_philly(DATA / "philly-slice.csv", seed=0)
    c = load_philly(DATA / "philly-slice.csv", seed=1)
    assert [j.to_json() for j in a] == [j.to_json() for j in b]
    assert [j.checkpoint_gb for j in a] != [j.checkpoint_gb for j in c]
    # the same job in the full trace gets the same synthesized fields (same row id aside)
    full = {(j.submit, j.duration_s, j.gpus, j.team): j for j in load_philly(
        shared_traces_dir() / "philly-2017-09-10.csv")} \
        if (shared_traces_dir() / "philly-2017-09-10.csv").exists() else None
    if full is None:
        pytest.skip("shared traces not available")
    for j in a:
        twin = full[(j.submit, j.duration_s, j.gpus, j.team)]
        assert twin.tier == j.tier


def test_openb_slice():
    jobs = load_openb(DATA / "openb-slice.csv")
    # 40 pods: 2 without GPUs dropped; every other pod was scheduled and deleted later
    assert len(jobs) == 38
    assert {j.tier for j in jobs if j.team == "BE"} == {3}
    assert {j.tier for j in jobs if j.team == "Burstable"} == {2}
    assert {j.tier for j in jobs if j.team == "LS"} <= {1, 2}
    eight = next(j for j in jobs if j.gpus == 8)
    assert eight.nodes == 1
    assert jobs == sorted(jobs, key=lambda j: (j.submit, j.id))
    # time_scale compresses arrivals around the first
    half = load_trace(DATA / "openb-slice.csv", "openb", time_scale=0.5)
    t0 = jobs[0].submit
    assert [h.submit - t0 for h in half] == pytest.approx([(j.submit - t0) / 2 for j in jobs])


def test_jsonl_roundtrip_and_detection(tmp_path):
    jobs = load_philly(DATA / "philly-slice.csv")[:5]
    p = tmp_path / "t.jsonl"
    write_jsonl(jobs, p)
    assert detect_format(p) == "jsonl"
    assert detect_format(DATA / "philly-slice.csv") == "philly"
    assert detect_format(DATA / "openb-slice.csv") == "openb"
    back = load_trace(p)
    assert [j.to_json() for j in back] == [j.to_json() for j in jobs]


def test_jsonl_iso_times_and_errors(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("# a comment\n"
                 '{"id": "a", "submit": "2026-01-05T00:00:00Z", "duration_s": 60, '
                 '"gpus_per_node": 2}\n\n')
    (a,) = load_jsonl(p)
    assert a.submit == datetime(2026, 1, 5, tzinfo=UTC).timestamp()
    assert a.tier == 3 and a.nodes == 1
    p.write_text('{"id": "a", "submit": 0, "gpus_per_node": 2, "colour": 1}\nnot json\n')
    with pytest.raises(InputError) as e:
        load_jsonl(p)
    text = "\n".join(e.value.errors)
    assert "line 1: missing field(s) ['duration_s']" in text
    assert "line 1: unknown field(s) ['colour']" in text
    assert "line 2: malformed JSON" in text


def test_missing_trace_names_the_file():
    with pytest.raises(InputError, match="no-such-trace.csv"):
        load_trace("no-such-trace.csv")


def test_slice_with_carry_over():
    t0 = 1000.0
    jobs = [TraceJob(id="old", submit=0.0, duration_s=1500.0, gpus_per_node=1),
            TraceJob(id="done", submit=0.0, duration_s=500.0, gpus_per_node=1),
            TraceJob(id="new", submit=1200.0, duration_s=10.0, gpus_per_node=1),
            TraceJob(id="late", submit=1000.0 + 86400.0, duration_s=10.0, gpus_per_node=1)]
    out = slice_trace(jobs, t0, 1.0, carry_over=True)
    assert [j.id for j in out] == ["old", "new"]
    assert (out[0].submit, out[0].duration_s, out[0].extra["carry_over"]) == (1000.0, 500.0, True)
    assert [j.id for j in slice_trace(jobs, t0, 1.0)] == ["new"]


def test_cluster_generator_and_snapshot_file(tmp_path):
    snap = generate_cluster({"nodes": 10, "storage_targets": 2, "nodes_per_block": 4})
    assert sum(n.gpus for n in snap.nodes) == 80
    assert [n.storage for n in snap.nodes] == ["nfs-0"] * 5 + ["nfs-1"] * 5
    assert snap.nodes[9].block == "rack-02"
    with pytest.raises(InputError, match="generator.gpus: unknown field"):
        generate_cluster({"gpus": 8})
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"version": 1, "now": "2026-01-05T00:00:00Z",
                             "nodes": [{"id": "a", "gpus": 4}],
                             "jobs": [{"id": "j", "tier": 9, "state": "pending",
                                       "gpus_per_node": 1}]}))
    snap = load_cluster(f)   # jobs are ignored (even a bad one)
    assert [n.id for n in snap.nodes] == ["a"] and snap.jobs == []


@pytest.mark.parametrize(("field", "value", "said"), [
    ("duration_s", "300", 'duration_s: must be a number of seconds from above 0 to 10^9, got "300"'),
    ("nodes", None, "nodes: must be a whole number from 1 to 100,000, got null"),
    ("gpus_per_node", 2.5, "gpus_per_node: must be a whole number from 1 to 1,024, got 2.5"),
    ("id", 5, "id: must be a non-empty string, got 5"),
    ("checkpoint_gb", -5, "checkpoint_gb: must be a number from 0 to 10^9, got -5"),
    ("topology", "ring", 'topology: must be "nvlink" or "any", got "ring"'),
    ("priority", 1e30, "priority: must be a number within +-10^9, got 1e+30"),
    ("extra", "x", 'extra: must be an object, got "x"'),
    ("time_limit_s", float("inf"),
     "time_limit_s: must be null or a number of seconds from above 0 to 10^9, got Infinity"),
    ("submit", -1e12, "submit: outside 1970-01-01 to 9000-01-01"),
])
def test_a_jsonl_record_of_the_wrong_type_or_range_is_bad_input(
        tmp_path: Path, field: str, value: Any, said: str) -> None:
    # (each reached the simulator and was an internal error there)
    row = {"id": "a", "submit": 1767571200, "duration_s": 300, "gpus_per_node": 8}
    row[field] = value
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError) as exc:
        load_jsonl(path)
    assert f"line 1: {said}" in exc.value.errors
