"""Presenting simulation metrics: rich tables, a Markdown comparison and PNG charts.

matplotlib is an optional extra (``pip install preempt-planner[plots]``); without
it :func:`write_charts` returns no files and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from planner.sim.engine import SimResult

__all__ = ["comparison_rows", "comparison_table", "have_matplotlib", "markdown_report",
           "metrics_table", "write_charts"]

Row = tuple[str, Callable[[dict[str, Any]], Any], str]


def _f(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "-"
        return f"{x:,.{nd}f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _dur(x: Any) -> str:
    if x is None:
        return "-"
    if x < 120:
        return f"{x:.0f} s"
    if x < 7200:
        return f"{x / 60:.1f} min"
    return f"{x / 3600:.1f} h"


def _storm_ratio(m: dict[str, Any]) -> Any:
    r = [s["peak_vs_bandwidth"] for s in m["storage"].values() if s["peak_vs_bandwidth"]]
    return max(r) if r else 0.0


def _pick(key: str, tier: str, q: str) -> Callable[[dict[str, Any]], Any]:
    def get(m: dict[str, Any]) -> Any:
        return m[key].get(tier, {}).get(q)

    return get


def comparison_rows(metrics: Sequence[dict[str, Any]]) -> list[Row]:
    """Rows (name, getter, format) shown for every run; per-tier rows for every tier seen."""
    rows: list[Row] = [
        ("jobs completed / submitted", lambda m: f"{m['completed']:,} / {m['jobs']:,}", "s"),
        ("goodput", lambda m: m["goodput"], "pct"),
        ("utilization", lambda m: m["utilization"], "pct"),
        ("wasted GPU-h: lost progress", lambda m: m["wasted_gpu_h"]["lost"], "f1"),
        ("wasted GPU-h: restore", lambda m: m["wasted_gpu_h"]["restore"], "f1"),
        ("wasted GPU-h: checkpoint flush", lambda m: m["wasted_gpu_h"]["flush"], "f1"),
        ("wasted GPU-h: total", lambda m: m["wasted_gpu_h"]["total"], "f1"),
        ("evictions", lambda m: m["evictions"], "i"),
        ("evictions per completed job", lambda m: m["evictions_per_completed_job"], "f3"),
        ("failed emergency checkpoints", lambda m: m["failed_flushes"], "i"),
        ("max eviction rate (1 h window)", lambda m: m["eviction_rate"]["max"], "pct"),
        ("thrash-alert windows", lambda m: m["thrash_windows"], "i"),
        ("alert windows' evictions by preemptor tier",
         lambda m: ", ".join(f"t{k}: {v:,}" for k, v in m.get("thrash_by_preemptor_tier",
                                                                {}).items()) or "-", "s"),
        ("alert windows' repeat evictions", lambda m: m.get("thrash_repeats", 0), "i"),
        ("cascades", lambda m: m["cascades"], "i"),
        ("most consecutive preemptions", lambda m: m["max_consecutive_preemptions"], "i"),
        ("peak storm write / bandwidth", _storm_ratio, "f2"),
    ]
    tiers = sorted({t for m in metrics for t in m["queue_delay_s"]}, key=int)
    for t in tiers:
        for q in ("p50", "p95", "p99", "max"):
            rows.append((f"tier {t} queueing delay {q}", _pick("queue_delay_s", t, q), "dur"))
    for t in tiers:
        for q in ("p50", "p95"):
            rows.append((f"tier {t} completion time {q}", _pick("completion_time_s", t, q),
                         "dur"))
    rows += [
        ("planner calls", lambda m: m["planner_calls"], "i"),
        ("wall time per simulated day", lambda m: m["wall_s_per_sim_day"], "s_wall"),
    ]
    return rows


def _fmt(v: Any, kind: str) -> str:
    if kind == "pct":
        return _pct(v)
    if kind == "dur":
        return _dur(v)
    if kind == "f1":
        return _f(v, 1)
    if kind == "f2":
        return _f(v, 2)
    if kind == "f3":
        return _f(v, 3)
    if kind == "s_wall":
        return "-" if v is None else f"{v:.1f} s"
    return _f(v)


def metrics_table(m: dict[str, Any], title: str | None = None) -> Table:
    """One run's metrics as a rich table (plus per-storage storm lines)."""
    t = Table(title=title or f"simulation: {m['label']}", show_lines=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for name, get, kind in comparison_rows([m]):
        t.add_row(name, _fmt(get(m), kind))
    for sid, s in m["storage"].items():
        t.add_row(f"storage {sid}: peak flush write",
                  f"{s['peak_flush_write_gb_per_s']:.1f} / {s['bandwidth_gb_per_s']:.1f} GB/s")
    hist = ", ".join(f"{k}: {v}" for k, v in m["evictions_per_job"].items())
    t.add_row("evictions per job (histogram)", hist or "-")
    return t


def comparison_table(metrics: Sequence[dict[str, Any]], title: str = "comparison") -> Table:
    t = Table(title=title)
    t.add_column("metric")
    for m in metrics:
        t.add_column(str(m["label"]), justify="right")
    for name, get, kind in comparison_rows(metrics):
        t.add_row(name, *[_fmt(get(m), kind) for m in metrics])
    return t


def markdown_table(metrics: Sequence[dict[str, Any]]) -> str:
    head = "| metric | " + " | ".join(str(m["label"]) for m in metrics) + " |"
    sep = "| --- | " + " | ".join("---:" for _ in metrics) + " |"
    lines = [head, sep]
    for name, get, kind in comparison_rows(metrics):
        lines.append(f"| {name} | " + " | ".join(_fmt(get(m), kind) for m in metrics) + " |")
    return "\n".join(lines)


def markdown_report(metrics: Sequence[dict[str, Any]], charts: Sequence[Path],
                    header: str = "", chart_note: str | None = None) -> str:
    parts = ["# Simulation comparison", ""]
    if header:
        parts += [header, ""]
    parts += [markdown_table(metrics), ""]
    if charts:
        parts += ["## Charts", ""]
        parts += [f"![{p.stem}]({p.name})" for p in charts]
        parts.append("")
    if chart_note:
        parts += [f"> {chart_note}", ""]
    return "\n".join(parts)


# ---------------------------------------------------------------- charts


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _hourly(res: SimResult, key: str, how: str) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(res.samples["t"], dtype=float)
    v = np.asarray(res.samples[key], dtype=float)
    span = max(res.t_end - res.t0, 1.0)
    nb = max(1, int(np.ceil(span / 3600.0)))
    edges = res.t0 + 3600.0 * np.arange(nb + 1)
    hours = np.arange(nb) + 0.5
    if how == "sum":
        return hours, np.histogram(t, bins=edges, weights=v)[0]
    # step function held between samples: value at each hour's middle
    mids = res.t0 + 3600.0 * hours
    i = np.clip(np.searchsorted(t, mids, side="right") - 1, 0, max(0, len(v) - 1))
    return hours, (v[i] if len(v) else np.zeros(nb))


def write_charts(results: Sequence[SimResult], metrics: Sequence[dict[str, Any]],
                 out_dir: str | Path) -> list[Path]:
    """PNG charts: utilization and evictions over time, wasted hours by cause, wait-time
    CDFs per tier. Returns the files written ([] without matplotlib)."""
    if not have_matplotlib():
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    labels = [str(m["label"]) for m in metrics]

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for res, lab in zip(results, labels):
        h, u = _hourly(res, "alloc_gpus", "step")
        a1.plot(h, 100 * u / max(1, res.total_gpus), label=lab, lw=1)
        h, e = _hourly(res, "evictions", "sum")
        a2.plot(h, e, label=lab, lw=1)
    a1.set_ylabel("GPUs allocated (%)")
    a2.set_ylabel("evictions per hour")
    a2.set_xlabel("hours since start")
    a1.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    p = out / "over_time.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files.append(p)

    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = np.zeros(len(metrics))
    for cause in ("lost", "restore", "flush"):
        vals = np.array([m["wasted_gpu_h"][cause] for m in metrics])
        ax.bar(labels, vals, bottom=bottom, label=cause)
        bottom += vals
    ax.set_ylabel("wasted GPU-hours")
    ax.legend()
    fig.tight_layout()
    p = out / "wasted_by_cause.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files.append(p)

    tiers = sorted({j["tier"] for r in results for j in r.jobs})
    fig, axes = plt.subplots(1, max(1, len(tiers)), figsize=(4 * max(1, len(tiers)), 3.5),
                             squeeze=False)
    for ax, tier in zip(axes[0], tiers):
        for res, lab in zip(results, labels):
            w = np.sort([j["wait_s"] / 60.0 for j in res.jobs if j["tier"] == tier])
            if w.size:
                ax.plot(np.maximum(w, 1e-2), np.arange(1, w.size + 1) / w.size, label=lab, lw=1)
        ax.set_xscale("log")
        ax.set_title(f"tier {tier}")
        ax.set_xlabel("queueing delay (min)")
        ax.set_ylabel("fraction of jobs")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    p = out / "wait_cdf.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files.append(p)
    return files
