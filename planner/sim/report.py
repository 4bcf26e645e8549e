"""Presenting simulation metrics: rich tables, a Markdown comparison and PNG charts.

matplotlib is an optional extra (``pip install preempt-planner[plots]``); without
it :func:`write_charts` returns no files and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from rich.markup import escape
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


def _reasons(tier: str) -> Callable[[dict[str, Any]], str]:
    def get(m: dict[str, Any]) -> str:
        rs = m.get("wait_by_reason_h", {}).get(tier, {})
        return ", ".join(f"{r} {h:,.1f}" for r, h in list(rs.items())[:3]) or "-"
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
        rows.append((f"tier {t} pending job-h by deferral reason", _reasons(t), "s"))
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
    t = Table(title=escape(title or f"simulation: {m['label']}"), show_lines=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for name, get, kind in comparison_rows([m]):
        t.add_row(name, _fmt(get(m), kind))
    for sid, s in m["storage"].items():
        t.add_row(escape(f"storage {sid}: peak flush write"),
                  f"{s['peak_flush_write_gb_per_s']:.1f} / {s['bandwidth_gb_per_s']:.1f} GB/s")
    hist = ", ".join(f"{k}: {v}" for k, v in m["evictions_per_job"].items())
    t.add_row("evictions per job (histogram)", hist or "-")
    return t


def comparison_table(metrics: Sequence[dict[str, Any]], title: str = "comparison") -> Table:
    t = Table(title=escape(title))
    t.add_column("metric")
    for m in metrics:
        t.add_column(escape(str(m["label"])), justify="right")
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


# Okabe-Ito: told apart with every common colour-vision deficiency, and each series
# also has its own marker and line style (and stays apart in grey print)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000",
           "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES: tuple[Any, ...] = ("-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)),
                           (0, (1, 3)), (0, (6, 2, 2, 2)))
CAUSES = (("lost", "lost progress", "//"), ("restore", "restore", ".."),
          ("flush", "checkpoint flush", "xx"))


def _style(k: int, n_points: int) -> dict[str, Any]:
    """The k-th series' colour, marker and line style (markers spaced out)."""
    return {"color": PALETTE[k % len(PALETTE)], "marker": MARKERS[k % len(MARKERS)],
            "linestyle": DASHES[k % len(DASHES)], "lw": 1.4, "markersize": 5,
            # every point of a short series; else about every tenth of the line's length
            "markevery": None if n_points <= 25 else 0.1, "markerfacecolor": "none"
            if k >= len(PALETTE) else PALETTE[k % len(PALETTE)]}


def _labels(series: Sequence[tuple[np.ndarray, np.ndarray]], labels: Sequence[str]) -> list[str]:
    """Legend labels; a series equal to an earlier one says so ("greedy (= cpsat)"),
    as its line lies under the other's."""
    out = []
    for k, (x, y) in enumerate(series):
        same = next((labels[i] for i in range(k) if np.array_equal(series[i][0], x)
                     and np.array_equal(series[i][1], y)), None)
        out.append(f"{labels[k]} (= {same})" if same else labels[k])
    return out


def _hourly_sum(res: SimResult, key: str) -> tuple[np.ndarray, np.ndarray]:
    """``key`` summed per hour since the start: (hour middles, sums)."""
    t = np.asarray(res.samples["t"], dtype=float)
    v = np.asarray(res.samples[key], dtype=float)
    nb = max(1, int(np.ceil(max(res.t_end - res.t0, 1.0) / 3600.0)))
    edges = res.t0 + 3600.0 * np.arange(nb + 1)
    return np.arange(nb) + 0.5, np.histogram(t, bins=edges, weights=v)[0]


def _held(res: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """GPUs held over time, as a step function: (hours since start, % of the cluster)."""
    t = (np.asarray(res.samples["t"], dtype=float) - res.t0) / 3600.0
    v = 100.0 * np.asarray(res.samples["alloc_gpus"], dtype=float) / max(1, res.total_gpus)
    return t, v


def _legend_right(fig: Any, ax: Any, handles: Any = None, labels: Any = None) -> Any:
    """The legend to the right of the axes, outside the data."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    return ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                     fontsize=8, frameon=False, borderaxespad=0.0)


def _save(fig: Any, path: Path, extra: Sequence[Any] = ()) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight", bbox_extra_artists=list(extra))
    plt.close(fig)
    return path


def write_charts(results: Sequence[SimResult], metrics: Sequence[dict[str, Any]],
                 out_dir: str | Path) -> list[Path]:
    """PNG charts: GPUs held and evictions over time, wasted GPU time by cause, and
    the queueing-delay CDF of each tier. Each planner has its own colour
    (colour-blind safe), marker and line style; legends sit outside the data, a
    series equal to another says so, and the CDF has a legend on every panel.
    Returns the files written ([] without matplotlib)."""
    if not have_matplotlib():
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    labels = [str(m["label"]) for m in metrics]
    return [_over_time(plt, results, labels, out / "over_time.png"),
            _wasted(plt, metrics, labels, out / "wasted_by_cause.png"),
            _wait_cdf(plt, results, labels, out / "wait_cdf.png")]


def _over_time(plt: Any, results: Sequence[SimResult], labels: Sequence[str],
               path: Path) -> Path:
    """GPUs held and evictions per hour: one panel each, one line per planner."""
    from matplotlib.ticker import MaxNLocator

    fig, (held, evicted) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    span_h = max((r.t_end - r.t0) / 3600.0 for r in results) if results else 0.0
    per, unit = (24.0, "days") if span_h > 72 else (1.0, "hours")  # (x: hours, or days)
    series = [(x / per, y) for x, y in (_held(r) for r in results)]
    for k, ((x, y), name) in enumerate(zip(series, _labels(series, labels), strict=True)):
        held.plot(x, y, drawstyle="steps-post", label=name, **_style(k, len(x)))
    top = max((float(y.max()) for _x, y in series if y.size), default=0.0)
    if top >= 80:
        held.axhline(100.0, color="0.5", lw=0.8, linestyle=":")
    held.set_ylim(0, max(5.0, top * 1.08))
    held.set_ylabel("GPUs held (% of the cluster)")
    held.set_title("GPUs held", fontsize=9, loc="left")
    legend = _legend_right(fig, held)
    series = [(x / per, y) for x, y in (_hourly_sum(r, "evictions") for r in results)]
    for k, ((x, y), name) in enumerate(zip(series, _labels(series, labels), strict=True)):
        evicted.plot(x, y, drawstyle="steps-mid", label=name, **_style(k, len(x)))
    evicted.set_ylabel("evictions per hour")
    evicted.set_xlabel(f"{unit} since the start")
    evicted.set_ylim(0, max(1.0, max((float(y.max()) for _x, y in series if y.size),
                                     default=0.0)) * 1.08)
    evicted.yaxis.set_major_locator(MaxNLocator(integer=True))
    extra = [legend, _legend_right(fig, evicted)]
    fig.tight_layout()
    return _save(fig, path, extra)


def _wasted(plt: Any, metrics: Sequence[dict[str, Any]], labels: Sequence[str],
            path: Path) -> Path:
    """Wasted GPU time by cause, a stacked bar per planner, in a unit that suits it."""
    values = {c: np.array([float(m["wasted_gpu_h"][c]) for m in metrics]) for c, _n, _h in CAUSES}
    sums = cast(np.ndarray, sum(values.values()))  # (elementwise: arrays of one length)
    top = max(float(sums.max()) if len(metrics) else 0.0, 0.0)
    scale, unit = ((1.0, "GPU-hours") if top >= 1 else (60.0, "GPU-minutes") if top >= 1 / 60
                   else (3600.0, "GPU-seconds"))
    fig, ax = plt.subplots(figsize=(min(12.0, max(6.0, 1.0 * len(metrics) + 3)), 4))
    bottom = np.zeros(len(metrics))
    for k, (cause, name, hatch) in enumerate(CAUSES):
        ax.bar(labels, values[cause] * scale, bottom=bottom, label=name, hatch=hatch,
               color=PALETTE[k], edgecolor="white", linewidth=0.5)
        bottom += values[cause] * scale
    for x, total in enumerate(bottom):
        ax.annotate(f"{total:.3g}", (x, total), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_ylabel(f"wasted {unit}")
    ax.set_ylim(0, (float(bottom.max()) * 1.15 if top > 0 else 1.0))
    ax.set_title("Wasted GPU time by cause" + ("" if top > 0 else ": none in any run"),
                 fontsize=10, loc="left")
    plt.setp(ax.get_xticklabels(), rotation=20 if len(metrics) > 4 else 0, ha="right"
             if len(metrics) > 4 else "center")
    legend = _legend_right(fig, ax)
    fig.tight_layout()
    return _save(fig, path, [legend])


def _wait_cdf(plt: Any, results: Sequence[SimResult], labels: Sequence[str],
              path: Path) -> Path:
    """The queueing-delay CDF of each tier, a panel each, each with its legend."""
    from matplotlib.ticker import FuncFormatter

    tiers = sorted({j["tier"] for r in results for j in r.jobs})
    n = max(1, len(tiers))
    # one row per tier, its legend on its right (however many planners there are)
    fig, axes = plt.subplots(n, 1, figsize=(9, max(3.2, 0.25 * len(labels) + 1.2) * n),
                             squeeze=False)
    extra = []
    for ax, tier in zip(axes[:, 0], tiers, strict=False):
        series = []
        for res in results:
            w = np.sort([j["wait_s"] / 60.0 for j in res.jobs if j["tier"] == tier])
            # the ECDF from 0, as a step function: starts at the shortest delay
            series.append((np.concatenate([[0.0], w]),
                           np.concatenate([[0.0], np.arange(1, w.size + 1) / max(1, w.size)])))
        for k, ((x, y), name) in enumerate(zip(series, _labels(series, labels), strict=True)):
            ax.plot(x, y, drawstyle="steps-post", label=name, **_style(k, len(x)))
        jobs = len(series[0][0]) - 1 if series else 0
        longest = max((float(x.max()) for x, _y in series if x.size), default=0.0)
        if longest > 10:  # (0 min stays on the axis; logarithmic beyond 1 min)
            ax.set_xscale("symlog", linthresh=1.0)
            ax.set_xlim(left=-0.2)
        else:
            ax.set_xlim(left=-0.02 * max(longest, 1.0))  # (a line at 0 min: off the axis)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.set_ylim(0, 1.03)
        ax.set_title(f"Queueing delay, tier {tier} ({jobs} job{'s' if jobs != 1 else ''})",
                     fontsize=10, loc="left")
        ax.set_xlabel("queueing delay (min)")
        ax.set_ylabel("fraction of the tier's jobs")
        ax.grid(True, which="major", color="0.9", lw=0.6)
        extra.append(_legend_right(fig, ax))
    fig.tight_layout()
    return _save(fig, path, extra)
