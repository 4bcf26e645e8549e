"""Prometheus metrics in the text exposition format (``prometheus-client``, one
private ``CollectorRegistry`` per call, so nothing leaks into the global one).

- :func:`run_metrics` / :func:`write_run_metrics`: one file per simulation run
  (``simulate --metrics-out FILE``).
- :func:`plan_metrics`: one plan (one tick); the ``plan`` command writes it per
  tick with ``--metrics-out``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, write_to_textfile

from models import Plan, Snapshot

__all__ = ["THRASH_FRACTION", "plan_metrics", "run_metrics", "write_run_metrics"]

THRASH_FRACTION = 0.05


def _run_registry(m: dict[str, Any]) -> CollectorRegistry:
    reg = CollectorRegistry()
    lab = ["planner"]
    who = str(m.get("label") or m.get("planner") or "")
    Counter("preempt_sim_evictions", "Evictions over the run", lab,
            registry=reg).labels(who).inc(m["evictions"])
    Counter("preempt_sim_completions", "Jobs completed over the run", lab,
            registry=reg).labels(who).inc(m["completed"])
    Counter("preempt_sim_cascades", "Evictions made for a job evicted in the previous window",
            lab, registry=reg).labels(who).inc(m["cascades"])
    wasted = Counter("preempt_sim_wasted_gpu_seconds", "Wasted GPU-seconds by cause",
                     lab + ["cause"], registry=reg)
    for cause in ("lost", "restore", "flush"):
        wasted.labels(who, cause).inc(m["wasted_gpu_h"][cause] * 3600.0)
    g = Gauge("preempt_sim_goodput_ratio", "Useful over allocated GPU-seconds", lab, registry=reg)
    g.labels(who).set(m["goodput"] if m["goodput"] is not None else float("nan"))
    g = Gauge("preempt_sim_utilization_ratio", "Allocated GPU-seconds over capacity", lab,
              registry=reg)
    g.labels(who).set(m["utilization"] if m["utilization"] is not None else float("nan"))
    g = Gauge("preempt_sim_eviction_rate_max_ratio",
              "Largest evictions/active jobs over a sliding window", lab, registry=reg)
    g.labels(who).set(m["eviction_rate"]["max"])
    Gauge("preempt_sim_thrash_windows", "Windows whose evictions exceeded the thrash fraction",
          lab, registry=reg).labels(who).set(m["thrash_windows"])
    Gauge("preempt_sim_thrash_alert", "1 when any window exceeded the thrash fraction", lab,
          registry=reg).labels(who).set(1 if m["thrash_windows"] else 0)
    peak = Gauge("preempt_sim_storm_peak_write_gb_per_second",
                 "Peak emergency-checkpoint write rate needed per storage target",
                 lab + ["storage"], registry=reg)
    bw = Gauge("preempt_sim_storage_bandwidth_gb_per_second", "Write bandwidth per storage target",
               lab + ["storage"], registry=reg)
    for sid, s in m["storage"].items():
        peak.labels(who, sid).set(s["peak_flush_write_gb_per_s"])
        bw.labels(who, sid).set(s["bandwidth_gb_per_s"])
    q = Gauge("preempt_sim_queue_delay_seconds", "Queueing delay percentiles per tier",
              lab + ["tier", "quantile"], registry=reg)
    for tier, p in m["queue_delay_s"].items():
        for k in ("p50", "p95", "p99"):
            if p[k] is not None:
                q.labels(who, tier, k[1:]).set(p[k])
    Gauge("preempt_sim_max_consecutive_preemptions", "Most consecutive preemptions of a job",
          lab, registry=reg).labels(who).set(m["max_consecutive_preemptions"])
    return reg


def run_metrics(metrics: dict[str, Any]) -> str:
    """Text exposition of a run's metrics (from ``compute_metrics``)."""
    return generate_latest(_run_registry(metrics)).decode()


def write_run_metrics(metrics: dict[str, Any], path: str | Path) -> None:
    """Write a run's metrics file atomically (``write_to_textfile``)."""
    write_to_textfile(str(path), _run_registry(metrics))


def plan_metrics(plan: Plan, snapshot: Snapshot | None = None) -> str:
    """Text exposition for one plan (one tick): evictions and placements counters,
    eviction rate (evictions over the snapshot's running jobs, when given), the
    eviction cost as wasted GPU-seconds, storm load per storage target and the
    thrash alert (rate above 5%)."""
    reg = CollectorRegistry()
    Counter("preempt_plan_evictions", "Evictions in this plan", registry=reg).inc(
        len(plan.evictions))
    Counter("preempt_plan_placements", "Placements in this plan", registry=reg).inc(
        len(plan.placements))
    Counter("preempt_plan_completions", "Jobs completed (not known to a single plan: 0)",
            registry=reg)
    Counter("preempt_plan_wasted_gpu_seconds", "Eviction cost of this plan (objective item 4)",
            registry=reg).inc(sum(e.cost_gpu_s for e in plan.evictions))
    d = Gauge("preempt_plan_deferred", "Deferred jobs by reason", ["reason"], registry=reg)
    for r in sorted({x.reason for x in plan.deferred}):
        d.labels(r).set(sum(1 for x in plan.deferred if x.reason == r))
    adm = Gauge("preempt_plan_admitted_gpus", "GPUs admitted per tier", ["tier"], registry=reg)
    for t, n in sorted(plan.objective.admitted_gpus.items()):
        adm.labels(t).set(n)
    gb = Gauge("preempt_plan_storm_flush_gb", "Checkpoint GB flushed per storage target",
               ["storage"], registry=reg)
    fs = Gauge("preempt_plan_storm_flush_seconds", "Shared flush time per storage target",
               ["storage"], registry=reg)
    for s in plan.storm:
        gb.labels(s.storage).set(s.flush_gb)
        fs.labels(s.storage).set(s.flush_s)
    rate = Gauge("preempt_plan_eviction_rate_ratio", "Evictions over running jobs",
                 registry=reg)
    alert = Gauge("preempt_plan_thrash_alert", f"1 when the eviction rate exceeds "
                  f"{THRASH_FRACTION:.0%} of running jobs", registry=reg)
    if snapshot is not None:
        ratio = len(plan.evictions) / max(1, len(snapshot.running()))
        rate.set(ratio)
        alert.set(1 if ratio > THRASH_FRACTION else 0)
    else:
        rate.set(float("nan"))
        alert.set(0)
    return generate_latest(reg).decode()
