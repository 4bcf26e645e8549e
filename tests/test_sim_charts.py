"""compare's charts: written as PNGs next to the report, each planner with its own
colour, marker and line style, and a series equal to another says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cli
from planner.sim.report import DASHES, MARKERS, PALETTE, _labels, _style

SIM = Path(__file__).resolve().parent / "data" / "sim"


def test_the_charts_are_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "report"
    assert cli.main(["compare", "--cluster", str(SIM / "cluster-1node.json"), "--trace",
                     str(SIM / "ping-pong.jsonl"), "--planners", "cpsat,greedy,naive",
                     "--deterministic", "--out", str(out), "--quiet"]) == 0
    charts = ["over_time.png", "wasted_by_cause.png", "wait_cdf.png"]
    for name in charts:
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000, name
    report = (out / "report.md").read_text()
    assert all(f"({name})" in report for name in charts)
    assert "Charts skipped" not in report
    capsys.readouterr()


def test_each_planner_has_its_own_colour_marker_and_line_style() -> None:
    styles = [_style(k, 100) for k in range(len(PALETTE))]
    for key in ("color", "marker", "linestyle"):
        assert len({str(s[key]) for s in styles}) == len(PALETTE), key
    assert len(MARKERS) >= len(PALETTE) and len(DASHES) >= len(PALETTE)


def test_a_series_equal_to_another_says_so() -> None:
    # identical lines lie on top of each other: the legend says which
    x = np.arange(3.0)
    same, other = (x, np.array([1.0, 2.0, 3.0])), (x, np.array([1.0, 0.0, 3.0]))
    assert _labels([same, same, other, same], ["cpsat", "greedy", "naive", "slurm"]) == [
        "cpsat", "greedy (= cpsat)", "naive", "slurm (= cpsat)"]
