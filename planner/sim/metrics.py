"""Metrics of a simulation run, computed from its :class:`SimResult` record.

Definitions (also in ``docs/simulation.md``):

- allocated GPU-s: GPUs held by jobs, from their start to their completion or
  eviction, plus each victim's time from eviction to exit (its flush, at most its
  grace; ``cleanup_s`` without a signal); useful GPU-s: the progress jobs keep
  (completed work, saved checkpoints, progress of jobs still running at the end).
  ``allocated = useful + lost + restore + flush``.
- goodput = useful / allocated; utilization = allocated / (GPUs x span).
- wasted GPU-hours: ``lost`` (progress since the last checkpoint thrown away),
  ``restore`` (restarts reloading), ``flush`` (GPUs held by victims from eviction to exit).
- eviction rate: evictions in the last ``thrash_window_s`` over active jobs, at
  every recorded tick; a thrash window is a whole window (back to back from the
  start) whose evictions exceed ``thrash_fraction`` of its time-averaged active jobs.
- cascade: an eviction made for a job that was itself evicted within the
  previous ``cascade_window_s``.
- queueing delay: all time a job spent pending (first wait plus waits after each
  requeue; jobs still pending at the end count up to the end); completion time:
  completion minus submission, completed jobs only.
- consecutive preemptions: evictions of one job with less than
  ``streak_reset_s`` of progress between them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from planner.sim.engine import SimResult

__all__ = ["compute_metrics", "eviction_rate_series", "percentiles"]


def percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    a = np.asarray(values, dtype=float)
    return {"n": int(a.size), "p50": float(np.percentile(a, 50)),
            "p95": float(np.percentile(a, 95)), "p99": float(np.percentile(a, 99)),
            "max": float(a.max()), "mean": float(a.mean())}


def eviction_rate_series(res: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """(t, rate): evictions in the trailing window over active jobs, at every sample."""
    w = float(res.config.get("thrash_window_s", 3600.0))
    t = np.asarray(res.samples["t"], dtype=float)
    active = np.asarray(res.samples["running"], dtype=float)
    ev_t = np.sort(np.asarray([e["t"] for e in res.evictions], dtype=float))
    if t.size == 0:
        return t, t
    hi = np.searchsorted(ev_t, t, side="right")
    lo = np.searchsorted(ev_t, t - w, side="right")
    return t, (hi - lo) / np.maximum(1.0, active)


def _thrash_windows(res: SimResult) -> tuple[int, list[dict[str, Any]]]:
    """(windows, the windows over the threshold) for back-to-back windows from t0;
    each alert window says when it starts (hours from t0), its evictions and
    time-averaged active jobs, the tiers of the placed jobs whose placements caused
    its evictions (a victim with preemptors of two tiers counts for both) and how
    many were repeat evictions of a job already evicted in the same window."""
    w = float(res.config.get("thrash_window_s", 3600.0))
    frac = float(res.config.get("thrash_fraction", 0.05))
    t = np.asarray(res.samples["t"], dtype=float)
    r = np.asarray(res.samples["running"], dtype=float)
    span = res.t_end - res.t0
    if t.size == 0 or span <= 0:
        return 0, []
    nw = max(1, int(np.ceil(span / w)))
    edges = res.t0 + w * np.arange(nw + 1)
    edges[-1] = max(edges[-1], res.t_end)
    # integral of the step function r (value r[i] on [t[i], t[i+1]))
    tt = np.append(t, max(res.t_end, t[-1]))
    cum = np.concatenate([[0.0], np.cumsum(r * np.diff(tt))])

    def integral(x: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(tt, x, side="right") - 1, 0, len(r) - 1)
        return cum[i] + r[i] * np.clip(x - tt[i], 0, None)

    ints = integral(edges)
    lengths = np.diff(edges)
    avg_active = np.diff(ints) / lengths
    ev_t = np.asarray([e["t"] for e in res.evictions], dtype=float)
    counts = np.histogram(ev_t, bins=edges)[0] if ev_t.size else np.zeros(nw)
    over = counts > frac * np.maximum(avg_active, 1.0)
    alerts: list[dict[str, Any]] = []
    if not over.any():
        return nw, alerts
    which = np.clip(np.searchsorted(edges, ev_t, side="right") - 1, 0, nw - 1)
    for k in np.flatnonzero(over):
        evs = [e for e, w in zip(res.evictions, which) if w == k]
        tiers: Counter[str] = Counter()
        for e in evs:
            for pt in e.get("preemptor_tiers", []):
                tiers[str(pt)] += 1
        alerts.append({"hour": round(float(edges[k] - res.t0) / 3600.0, 3),
                       "evictions": len(evs), "active": round(float(avg_active[k]), 1),
                       "by_preemptor_tier": dict(sorted(tiers.items())),
                       "repeats": len(evs) - len({e["job"] for e in evs})})
    return nw, alerts


def compute_metrics(res: SimResult) -> dict[str, Any]:
    """All metrics of one run as a JSON-ready dict."""
    cfg = res.config
    tot = res.totals
    span = max(0.0, res.t_end - res.t0)
    lost, restore, flush = tot["lost_gpu_s"], tot["restore_gpu_s"], tot["flush_gpu_s"]
    useful = tot["useful_gpu_s"]
    allocated = tot["run_gpu_s"] + flush
    jobs = res.jobs
    completed = [j for j in jobs if j["done_at"] is not None]
    started = [j for j in jobs if j["started"]]
    fresh = [j for j in jobs if not j.get("carry_over")]  # carry-over jobs: no delay stats
    ev = res.evictions
    hist = Counter(j["preemptions"] for j in started)
    _, rate = eviction_rate_series(res)
    nw, alerts = _thrash_windows(res)
    tiers = sorted({j["tier"] for j in jobs})
    storage: dict[str, dict[str, Any]] = {}
    for sid, bw in sorted(res.storage_bw.items()):
        rows = [s for s in res.storms if s["storage"] == sid]
        peak = max((s["required_gb_per_s"] for s in rows), default=0.0)
        storage[sid] = {
            "bandwidth_gb_per_s": bw,
            "peak_flush_write_gb_per_s": peak,
            "peak_vs_bandwidth": peak / bw if bw else None,
            "peak_flush_gb": max((s["flush_gb"] for s in rows), default=0.0),
            "storm_ticks": len(rows),
            "storm_ticks_over_bandwidth": sum(1 for s in rows if s["required_gb_per_s"] > bw),
            "failed_flushes": sum(s["lost"] for s in rows),
        }
    flushers = [e for e in ev if e["signal"] is not None]
    days = span / 86400.0
    out: dict[str, Any] = {
        "label": cfg.get("label") or cfg.get("planner"),
        "planner": cfg.get("planner"),
        "span_s": span,
        "total_gpus": res.total_gpus,
        "jobs": len(jobs),
        "started": len(started),
        "completed": len(completed),
        "goodput": useful / allocated if allocated > 0 else None,
        "utilization": allocated / (res.total_gpus * span) if span > 0 and res.total_gpus else None,
        "allocated_gpu_h": allocated / 3600.0,
        "useful_gpu_h": useful / 3600.0,
        "wasted_gpu_h": {"lost": lost / 3600.0, "restore": restore / 3600.0,
                         "flush": flush / 3600.0, "total": (lost + restore + flush) / 3600.0},
        "evictions": len(ev),
        "evictions_per_completed_job": len(ev) / len(completed) if completed else None,
        "evictions_per_job": {str(k): hist[k] for k in sorted(hist)},
        "failed_flushes": sum(1 for e in flushers if not e["saved"]),
        "evictions_without_signal": len(ev) - len(flushers),
        "eviction_rate": {"window_s": cfg.get("thrash_window_s"),
                          "max": float(rate.max()) if rate.size else 0.0,
                          "mean": float(rate.mean()) if rate.size else 0.0},
        "thrash_fraction": cfg.get("thrash_fraction"),
        "windows": nw,
        "thrash_windows": len(alerts),
        "thrash_alerts": alerts,
        "thrash_by_preemptor_tier": dict(sorted(sum((Counter(a["by_preemptor_tier"])
                                                     for a in alerts), Counter()).items())),
        "thrash_repeats": sum(a["repeats"] for a in alerts),
        "cascades": sum(1 for e in ev if e["cascade"]),
        "storage": storage,
        "periodic_checkpoint_gb_per_s_peak": max(res.samples["periodic_gb_per_s"], default=0.0),
        "queue_delay_s": {str(t): percentiles([j["wait_s"] for j in fresh if j["tier"] == t])
                          for t in tiers},
        "completion_time_s": {str(t): percentiles([j["done_at"] - j["submit"] for j in fresh
                                                   if j["tier"] == t and j["done_at"] is not None])
                              for t in tiers},
        "max_consecutive_preemptions": max((j["max_streak"] for j in jobs), default=0),
        "max_preemptions": max((j["preemptions"] for j in jobs), default=0),
        "planner_calls": res.planner_calls,
        "planner_wall_s": res.planner_wall_s,
        "planner_max_wall_s": res.planner_max_wall_s,
        "wall_s": res.wall_s,
        "wall_s_per_sim_day": res.wall_s / days if days > 0 else None,
        "plan_errors": len(res.plan_errors),
    }
    by_tier: dict[str, int] = defaultdict(int)
    for e in ev:
        by_tier[str(e["tier"])] += 1
    out["evictions_by_tier"] = dict(sorted(by_tier.items()))
    out["wait_by_reason_h"] = wait_by_reason(res)
    return out


def wait_by_reason(res: SimResult) -> dict[str, dict[str, float]]:
    """Job-hours pending per tier and deferral reason, largest first: each job a plan
    deferred counts, for the reason that plan gave, until the next planner call.
    Waits before the first call and of jobs no plan saw are not counted."""
    by: dict[str, dict[str, float]] = defaultdict(dict)
    for key, s in res.wait_by_reason_s.items():
        tier, reason = key.split(":", 1)
        by[tier][reason] = by[tier].get(reason, 0.0) + s / 3600
    return {t: dict(sorted(((r, round(h, 2)) for r, h in rs.items()), key=lambda x: -x[1]))
            for t, rs in sorted(by.items(), key=lambda x: int(x[0]))}
