"""``tune --ray`` and ``compare --ray`` on a real two-node Ray cluster started on this
machine (tests/ray_cluster.py: two ``ray start`` of one CPU each on 127.0.0.2 and .3, with
their own ports and temporary folders, stopped by the fixture whatever happens).

The search is the budget story of tests/test_tune.py on two seeds: 5 trials and the
2 references, 14 simulations, whose outcome is known (the front is B = 2 and B = 6).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'preempt-planner[ray]')")

from ray_cluster import LocalRayCluster

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "tune"
HOUR = 3660.0


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LocalRayCluster]:
    cluster = LocalRayCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
    assert not cluster._alive(), "a process of the Ray cluster is still running"


def tune_args(out: Path, address: str) -> list[str]:
    return [sys.executable, str(ROOT / "cli.py"), "tune", "--cluster",
            str(DATA / "cluster-56.yaml"), "--trace", str(DATA / "burst.jsonl"), "--space",
            str(DATA / "budget-space.yaml"), "--planner", "greedy", "--days", "0.5",
            "--seeds", "0,1", "--objective", "thrash,t2_max", "--out", str(out),
            "--ray", address, "-o", "json"]


def check_outcome(rec: dict) -> None:
    trials = {t["trial"]: t for t in rec["trials"]}
    assert [t["state"] for t in rec["trials"]] == ["complete"] * 5
    assert [trials[f"#{k}"]["values"]["thrash"] for k in range(1, 6)] == [0, 0, 2, 1, 1]
    assert [trials[f"#{k}"]["values"]["t2_max"] for k in range(1, 6)] == pytest.approx(
        [5 * HOUR, 2 * HOUR, HOUR, HOUR, 0.0], abs=0.1)
    assert rec["front"] == ["#2", "#5"]
    assert all(len(t["cells"]) == 2 for t in rec["trials"])


def test_tune_on_ray_gets_every_trial_when_a_worker_is_killed(
        ray_cluster: LocalRayCluster, tmp_path: Path) -> None:
    proc = subprocess.Popen(tune_args(tmp_path / "out", ray_cluster.address), cwd=ROOT,
                            env=ray_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and proc.poll() is None and time.monotonic() < deadline:
        busy = ray_cluster.task_workers("ray::_ray_call")  # a worker running a simulation
        if busy:
            os.kill(busy[0], signal.SIGKILL)
            killed = busy[0]
        time.sleep(0.02)
    out, err = proc.communicate(timeout=300)
    assert killed is not None, "no worker was seen running a simulation"
    assert proc.returncode == 0, err[-3000:]
    rec = json.loads(out)
    check_outcome(rec)
    assert rec["simulations"]["run"] == 14 and rec["simulations"]["failed"] == 0
    assert "on Ray cluster 127.0.0.2:" in rec["settings"]["where"]
    assert "(2 node(s), 2 CPU(s))" in rec["settings"]["where"]


def test_an_interrupted_tune_on_ray_resumes_from_the_cache(
        ray_cluster: LocalRayCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(tune_args(out, ray_cluster.address), cwd=ROOT,
                            env=ray_cluster.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if len(list((out / "cache").glob("*/*.json"))) >= 2:
            proc.send_signal(signal.SIGINT)
            break
        time.sleep(0.02)
    _, err = proc.communicate(timeout=120)
    cached = len(list((out / "cache").glob("*/*.json")))
    assert (proc.returncode, 2 <= cached < 14) == (130, True), (cached, err[-3000:])
    again = subprocess.run(tune_args(out, ray_cluster.address), cwd=ROOT, env=ray_cluster.env,
                           capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    rec = json.loads(again.stdout)
    check_outcome(rec)
    assert (rec["simulations"]["cached"], rec["simulations"]["run"]) == (cached, 14 - cached), \
        (err[-3000:], again.stderr[-3000:])


def test_compare_on_ray_gives_what_local_processes_give(
        ray_cluster: LocalRayCluster, tmp_path: Path) -> None:
    base = [sys.executable, str(ROOT / "cli.py"), "compare", "--cluster",
            str(ROOT / "tests" / "data" / "sim" / "cluster-1node.json"), "--trace",
            str(ROOT / "tests" / "data" / "sim" / "ping-pong.jsonl"), "--planners",
            "naive,greedy", "--deterministic", "-o", "json"]
    runs = {}
    for where, extra in (("ray", ["--ray", ray_cluster.address]), ("local", [])):
        r = subprocess.run([*base, "--out", str(tmp_path / where), *extra], cwd=ROOT,
                           env=ray_cluster.env, capture_output=True, text=True, timeout=300,
                           check=False)
        assert r.returncode == 0, r.stderr[-3000:]
        runs[where] = json.loads(r.stdout)
    keep = ("label", "evictions", "completed", "wasted_gpu_h", "queue_delay_s", "thrash_windows")
    assert [{k: m[k] for k in keep} for m in runs["ray"]] == \
        [{k: m[k] for k in keep} for m in runs["local"]]
    assert [m["evictions"] for m in runs["ray"]] == [6, 2]
    assert (tmp_path / "ray" / "report.md").exists()
