"""Running a simulation from a plain, picklable spec (what the CLI and ``compare``'s
worker processes share)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from models import InputError, Policy, load_policy, range_problems
from planner.sim.cluster import load_cluster
from planner.sim.engine import SimConfig, SimResult, Simulator
from planner.sim.metrics import compute_metrics
from planner.sim.traces import (
    in_contract_time,
    load_trace,
    parse_epoch,
    parse_tier_rule,
    slice_trace,
)

__all__ = ["RunSpec", "parse_time", "prepare", "run_spec", "set_policy"]


def parse_time(text: str | float | None) -> float | None:
    """Epoch seconds from a number or an ISO-8601 time (UTC when no zone is given), a
    time of the contract (from 1970, before 9000: InputError naming --start)."""
    t = parse_epoch(text, "--start")
    if t is not None and not in_contract_time(t):
        raise InputError([f"--start: {text!r} is not a time from 1970 to 9000"])
    return t


@dataclass
class RunSpec:
    cluster: str
    trace: str
    policy: str | None = None
    trace_format: str = "auto"
    carry_over: bool = False
    time_scale: float = 1.0
    node_gpus: int = 8
    config: dict[str, Any] = field(default_factory=dict)
    tier_rule: str | None = None  # see planner.sim.traces.TierRule (None: the format's)
    policy_sets: list[tuple[str, Any]] = field(default_factory=list)  # (dotted key, value)


MAX_DAYS = 3650  # simulated days at most (the metrics sample every tick of the span)
MIN_TICK_S = 1.0  # seconds between ticks at least (a scheduler's loop; 1e-320 overflowed)


def _check_numbers(cfg: SimConfig, time_scale: float) -> None:
    """The run's numbers, by the CLI option that sets each (InputError, exit 2)."""
    errors = range_problems([("--tick", cfg.tick_s), ("--days", cfg.days),
                             ("--time-limit", cfg.time_limit_s), ("--halflife", cfg.halflife_s),
                             ("--time-scale", time_scale)], [("--workers", cfg.workers)])
    if not errors and cfg.tick_s < MIN_TICK_S:
        errors.append(f"--tick: at least {MIN_TICK_S:g} s between ticks, got {cfg.tick_s:g}")
    if not errors and cfg.days is not None and cfg.days > MAX_DAYS:
        errors.append(f"--days: at most {MAX_DAYS:,} (ten years of a trace), got {cfg.days:g}")
    if errors:
        raise InputError(errors)


def prepare(spec: RunSpec) -> Simulator:
    """Load the cluster, policy and trace of a spec; raises InputError on bad input."""
    cfg = SimConfig(**spec.config)
    _check_numbers(cfg, spec.time_scale)
    policy = load_policy(Path(spec.policy)) if spec.policy else None
    cluster = load_cluster(spec.cluster, policy)
    if spec.policy_sets:
        cluster = cluster.model_copy(update={"policy": set_policy(cluster.policy,
                                                                  spec.policy_sets)})
    jobs = load_trace(spec.trace, spec.trace_format, seed=cfg.seed, node_gpus=spec.node_gpus,
                      tier_rule=parse_tier_rule(spec.tier_rule))
    scale = spec.time_scale
    if cfg.start is not None or spec.carry_over or cfg.days is not None or scale != 1.0:
        # the arrivals of days / scale trace days, compressed into the simulated days
        trace_days = None if cfg.days is None else cfg.days / scale
        jobs = slice_trace(jobs, cfg.start, trace_days, carry_over=spec.carry_over)
        if cfg.start is None and jobs:
            cfg.start = jobs[0].submit
        if scale != 1.0 and cfg.start is not None:
            for j in jobs:
                j.submit = cfg.start + (j.submit - cfg.start) * scale
    if not jobs:
        raise InputError(["trace: no job in the simulated period"], spec.trace)
    return Simulator(cluster, jobs, cfg, cluster.policy)


def set_policy(policy: Policy, sets: list[tuple[str, Any]]) -> Policy:
    """``policy`` with dotted keys set (``thrash=null``, ``thrash.max_fraction=0.1``,
    ``tiers.2.preempt_after_s=0``; a leading ``policy.`` is optional), as ``whatif
    --set`` sets them; InputError naming a key that names nothing or a bad value."""
    from planner.sim.whatif import apply_set

    data = {"policy": policy.model_dump(mode="json")}
    for key, value in sets:
        apply_set(data, key if key.startswith("policy.") else f"policy.{key}", value)
    return load_policy(data["policy"])


def run_spec(spec: RunSpec, progress: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run a spec; returns (raw result as JSON-ready dict, metrics)."""
    sim = prepare(spec)
    res = sim.run(progress)
    return res.to_json(), compute_metrics(res)


def spec_fields() -> list[str]:
    return [f.name for f in fields(RunSpec)]


def result_from_json(d: dict[str, Any]) -> SimResult:
    return SimResult.from_json(d)
