"""benchmarks/sim_matrix.py's runs on another trace and cluster (``--trace``,
``--cluster``, ``--load-unit``)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from sim_matrix import run_one


def _run(load_unit: float) -> dict:
    return run_one({"week": "2023-10-19", "load": 1.0, "load_unit": load_unit, "seed": 0,
                    "planner": "greedy", "days": 0.05, "time_limit": 1.0, "workers": 1,
                    "trace": str(REPO / "tests" / "data" / "sim" / "openb-slice.csv"),
                    "cluster": "tests/data/sim/cluster-256.yaml"})


def test_the_load_unit_compresses_the_trace_it_is_given() -> None:
    # openb-slice.csv: 2023-10-19 is 9,504,000 s after the trace's start. 0.05 days
    # (4,320 s) at the trace's own pace see no arrival (the next pod with GPUs is
    # created at 9,664,050 s): only the pods still running then (carry-over). At a
    # compression of 100 they hold 432,000 s of the trace, to 9,936,000 s: 8 more
    # pods (openb-pod-0019 at 9,664,050 s to openb-pod-0026 at 9,924,220 s; 0027
    # comes at 9,941,376 s). The cluster is the 256-GPU file's: every pod fits.
    slow, fast = _run(1.0), _run(100.0)
    assert fast["jobs"] - slow["jobs"] == 8
    assert fast["run"]["cluster"] == "tests/data/sim/cluster-256.yaml"
    assert fast["evictions"] == 0
