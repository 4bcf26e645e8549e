"""benchmarks/bench_ticks.py's carry_out: the next tick's snapshot of a recorded
sequence is the plan carried out, one tick later, with the arrivals and completions
asked for, and a valid snapshot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from models import load_snapshot
from planner import plan
from planner.sim.generate import generate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_ticks import carry_out


def test_the_next_tick_is_the_plan_carried_out_a_tick_later() -> None:
    doc = generate(nodes=16, pending=8, seed=2)
    p = plan(doc, deterministic=True).model_dump(mode="json")
    assert p["evictions"] and p["placements"]  # (this seed evicts and places)
    nxt = carry_out(doc, p, tick_s=60.0, rng=np.random.default_rng(0), arrivals=3,
                    completions=2, seq=1)
    jobs = {j["id"]: j for j in nxt["jobs"]}
    before = {j["id"]: j for j in doc["jobs"]}
    evicted = {e["job"] for e in p["evictions"]}
    placed = {pl["job"] for pl in p["placements"]}
    # victims are pending again, preempted at the old now, counted in the window
    for v in evicted:
        assert jobs[v]["state"] == "pending" and "placement" not in jobs[v]
        assert jobs[v]["last_preempted_at"] == doc["now"]
        assert jobs[v]["preemptions"] == before[v].get("preemptions", 0) + 1
    assert {e["job"] for e in nxt["recent_evictions"]} == evicted
    # placed jobs run where the plan put them
    for pl in p["placements"]:
        assert jobs[pl["job"]]["state"] == "running"
        assert jobs[pl["job"]]["placement"] == pl["placement"]
    # one tick later; 2 running jobs (not just placed) ended, 3 arrived at the new now
    assert (doc["now"], nxt["now"]) == ("2026-11-29T08:00:00Z", "2026-11-29T08:01:00Z")
    ended = set(before) - set(jobs)
    assert len(ended) == 2 and not ended & placed and not ended & evicted
    arrived = [j for j in nxt["jobs"] if j["id"].startswith("arrival-1-")]
    assert len(arrived) == 3 and all(j["submitted_at"] == nxt["now"] for j in arrived)
    assert len(nxt["jobs"]) == len(doc["jobs"]) - 2 + 3
    load_snapshot(json.loads(json.dumps(nxt)))  # a valid snapshot (raises otherwise)
    assert doc["jobs"] == list(before.values())  # the tick it came from is unchanged


def test_a_file_is_planned_with_and_without_the_reduction(tmp_path: Path) -> None:
    # --versus-whole plans the tick with CP-SAT's strategies searching every job
    # (the reduction replaced for the call, then put back): the same 8 pending jobs
    # placed or deferred either way, and the planner's own reduction afterwards
    from benchmarks.bench_ticks import plan_file
    from planner.core import reduce
    from planner.solver import cpsat

    path = tmp_path / "tick.json"
    path.write_text(json.dumps(generate(nodes=16, pending=8, seed=2)))
    whole, _doc = plan_file(path, 0.5, whole=True)
    fresh, _doc = plan_file(path, 0.5)
    assert whole["tick"] == "tick.json (whole tick) (fresh)"
    assert whole["pending"] == fresh["pending"] == 8
    assert cpsat.reduce_problem is reduce.reduce_problem
