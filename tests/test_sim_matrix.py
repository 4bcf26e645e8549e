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


def _metrics(planner: str, waste: float, completed: int, p95: dict[str, float]) -> dict:
    return {"run": {"week": "w", "seed": 0, "planner": planner}, "thrash_windows": 0,
            "wasted_gpu_h": {"total": waste}, "completed": completed,
            "queue_delay_s": {t: {"p95": p95.get(t, 10.0), "max": 20.0}
                              for t in ("1", "2", "3")}}


def test_a_run_that_wastes_more_than_greedy_says_what_it_got_for_it() -> None:
    # cpsat wastes 8.66 GPU-h against greedy's 7.81 (0.85 more) and completes 6,737
    # jobs against 6,734 (+3), with tier-2 p95 9,464 s against 9,616 s (0.98x) and
    # tier-3 p95 43,266 s against 50,435 s (0.86x): the numbers of 2017-10-11 at 2x,
    # seed 1, in docs/simulation.md. naive wastes 100 (cpsat's 9 is below half of it).
    from sim_matrix import checks
    runs = [_metrics("cpsat", 8.66, 6737, {"2": 9464, "3": 43266}),
            _metrics("greedy", 7.81, 6734, {"2": 9616, "3": 50435}),
            _metrics("naive", 100.0, 6000, {"2": 900, "3": 900})]
    lines = checks(runs, 2.0)
    assert lines[0] == (
        "- w s0 cpsat: missed waste vs greedy (alerts 0 vs naive 0; waste 9 vs naive 100;"
        " tier-2 p95 10.52x naive's; against greedy: 0.85 GPU-h more wasted, +3 jobs"
        " completed, tier-2 p95 0.98x and tier-3 p95 0.86x greedy's)")
    assert lines[1].startswith("- w s0 greedy: all met (")
    assert "against greedy" not in lines[1]
