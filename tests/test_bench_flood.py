"""benchmarks/bench_flood.py's queue: bench_scale's cluster with its pending jobs
replaced by job-array tasks (tier 1 + k mod 3, 1/3/5/8 GPUs, priority k mod 100)."""

from __future__ import annotations

import sys
from pathlib import Path

from models import load_snapshot

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_flood import flood


def test_the_flooded_queue_is_a_valid_snapshot_of_job_array_tasks() -> None:
    doc = flood(32, 10)
    snap = load_snapshot(doc)
    pending = [j for j in snap.jobs if j.state == "pending"]
    assert [j.id for j in pending] == [f"array-{k:07d}" for k in range(10)]
    assert [(j.tier, j.gpus_per_node, j.priority) for j in pending[:5]] == [
        (1, 1, 0), (2, 3, 1), (3, 5, 2), (1, 8, 3), (2, 1, 4)]
    # the running jobs are bench_scale's cluster's (32 nodes of 8 GPUs, 90% held)
    held = sum(j.total_gpus for j in snap.jobs if j.state == "running")
    assert len(snap.nodes) == 32 and 0.8 * 256 <= held <= 256
