"""Discrete-event simulator: replays a trace on a cluster, calling a planner every
tick, and executes its plans with the physics the plans only estimate.

Time advances in ticks of ``tick_s`` from the first arrival (or ``start``); events
(arrivals, completions, the end of a victim's grace) are exact in time and are
acted on at the next tick. A tick calls the planner only when something could
change: a pending job that may start exists and an event happened, a backoff
hold or immunity ran out, or the previous plan did something (or left jobs
deferred for STORM/BUDGET); other ticks are skipped outright.

Physics (see ``docs/simulation.md``):

- A placed job holds its GPUs from the tick it is placed; it starts when the last
  of them is released (a victim's GPUs come back when it exits, see below), then,
  after a restart, spends ``restore_s`` before progressing.
- Running jobs write a periodic checkpoint every ``checkpoint_interval_s`` of
  progress (asynchronously: it costs storage bandwidth, not GPU time).
- An evicted job with a signal writes an emergency checkpoint; all victims
  flushing on one storage target in the same tick share its bandwidth: ``flush =
  max(F_s / bw, shard / local) + barrier + cleanup``. If that fits in its grace
  its progress is saved and it exits when the flush ends (the grace is a
  deadline, not a duration); otherwise it is killed at the end of its grace and
  falls back to its last periodic checkpoint. A victim without a signal is
  stopped by the signal at once: it exits after its ``cleanup_s`` (process
  teardown) and falls back to its last periodic checkpoint.
- When it exits the victim gives its GPUs back and is requeued: ``preemptions
  += 1``, ``last_preempted_at`` = that time, and its queue age restarts
  (hysteresis).
- History for the cross-tick rules (contract section 9): every snapshot carries
  the evictions the simulator carried out in the last ``policy.thrash.window_s``
  (``recent_evictions``, R15), each running job's ``expected_end_at`` (the start
  of its current run plus its time limit, R17; see ``planner.sim.traces``) and
  each pending job's ``submitted_at`` (R16).
- Within a tier, pending jobs are ordered through the contract ``priority``:
  ``1000 * trace priority + 500 * fair-share + 500 * queue age`` (fair-share is
  ``2 ** -(used / fair)`` over team usage decayed with a half-life).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from models import Job, Plan, Policy, RecentEviction, Snapshot
from models.policy import minutes_of
from planner import SIM_PLANNERS
from planner.sim.traces import TraceJob

__all__ = ["SimConfig", "SimResult", "SimulationError", "Simulator", "get_planner", "simulate"]

PLANNERS = SIM_PLANNERS
FAIRSHARE_WEIGHT = 500
AGE_WEIGHT = 500
AGE_FULL_S = 86400.0

_ARRIVE, _RELEASE, _COMPLETE = 0, 1, 2
# deferred reasons whose ``until`` is a time at which the plan may change: the window
# loses an eviction (R15), a job has waited long enough (R16), a spared job ends (R17)
_WAIT_UNTIL = ("THRASH_BUDGET", "PATIENCE", "ENDING_SOON")


class SimulationError(RuntimeError):
    """A planner returned a plan the simulator cannot execute (a planner bug)."""


@dataclass
class SimConfig:
    planner: str = "cpsat"
    tick_s: float = 60.0
    days: float | None = None
    start: float | None = None
    seed: int = 0
    time_limit_s: float = 1.0
    deterministic: bool = False
    workers: int = 2
    fairshare: bool = True
    halflife_s: float = 86400.0
    thrash_window_s: float = 3600.0
    thrash_fraction: float = 0.05
    cascade_window_s: float = 3600.0
    streak_reset_s: float = 3600.0
    strict: bool = True
    label: str | None = None
    time_limits: bool = True  # running jobs carry expected_end_at (start + time limit)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def get_planner(cfg: SimConfig) -> Callable[[Snapshot], Plan]:
    """The planner behind ``cfg.planner``: the built-in naive baseline or ``planner.plan``."""
    if cfg.planner == "naive":
        from planner.sim.naive import plan_naive

        return plan_naive
    if cfg.planner not in PLANNERS:
        from models import InputError

        raise InputError([f"planner: {cfg.planner!r} unknown (one of {', '.join(PLANNERS)})"])
    from planner import Loop, warm_up  # written by the planner package

    if cfg.planner == "cpsat":  # (not inside the first tick's time limit)
        warm_up(cfg.deterministic)
    # one run's ticks: each takes over what the last did not change (the engine keeps
    # a job's record while it does not change, and the nodes, storage and policy)
    loop = Loop()

    def call(snap: Snapshot) -> Plan:
        return loop.plan(snap, time_limit_s=cfg.time_limit_s,
                            deterministic=cfg.deterministic, workers=cfg.workers,
                            planner=cfg.planner)

    return call


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


class _SJ:
    """Mutable state of one simulated job."""

    __slots__ = (
        "cache_key",
        "cache_obj",
        "done_at",
        "exit_at",
        "first_start",
        "gpus",
        "history",
        "idx",
        "last_evicted_at",
        "last_preempted_at",
        "max_streak",
        "placement",
        "preemptions",
        "progress",
        "queued_at",
        "run_priority",
        "seg_p0",
        "seg_place",
        "seg_run",
        "seg_start",
        "spec",
        "state",
        "streak",
        "submit",
        "version",
        "wait_s",
    )

    def __init__(self, spec: TraceJob, idx: int):
        self.spec = spec
        self.idx = idx
        self.state = "future"
        self.progress = 0.0            # durable progress (saved or completed)
        self.submit = spec.submit
        self.queued_at = spec.submit
        self.first_start: float | None = None
        self.done_at: float | None = None
        self.wait_s = 0.0
        self.preemptions = 0
        self.last_preempted_at: float | None = None
        self.last_evicted_at: float | None = None
        self.streak = 0
        self.max_streak = 0
        self.placement: list[tuple[str, list[int]]] = []
        self.seg_place = 0.0           # tick of the placement
        self.seg_start = 0.0           # GPUs really taken (after start_after / holds)
        self.seg_run = 0.0             # progress starts (after restore)
        self.seg_p0 = 0.0              # progress at the start of the segment
        self.version = 0
        self.run_priority = 0
        self.cache_key: tuple | None = None
        self.cache_obj: Job | None = None
        self.gpus = spec.gpus
        self.exit_at = 0.0             # when an evicted job gives its GPUs back
        self.history: list[tuple[str, float]] = []   # (start|evict|release|done, time)

    def progress_at(self, t: float) -> float:
        return min(self.spec.duration_s, self.seg_p0 + max(0.0, t - self.seg_run))

    def periodic_at(self, t: float) -> tuple[float, float | None]:
        """(progress, time) of the last periodic checkpoint at ``t`` in this segment."""
        interval = self.spec.checkpoint_interval_s
        if interval <= 0 or t <= self.seg_run:
            return self.seg_p0, None
        k = math.floor((t - self.seg_run) / interval)
        if k < 1:
            return self.seg_p0, None
        return min(self.spec.duration_s, self.seg_p0 + k * interval), self.seg_run + k * interval


def _began(j: _SJ, start: float) -> float:
    """When the run of ``j`` that started (in the simulation) at ``start`` began, as
    the snapshot says (``started_at``): a warm start's job in its first run has run
    since its own start before the simulated one (``--carry-over``), so that R6 sees
    its real age; the simulator loses none of the progress it made before then
    (``checkpoint.last_at`` is the simulated start at the latest)."""
    if j.spec.extra.get("carry_over") and j.preemptions == 0 and j.first_start == start:
        return min(start, float(j.spec.extra.get("original_submit", start)))
    return start


@dataclass
class SimResult:
    """Everything a run recorded; ``planner.sim.metrics`` turns it into metrics."""

    config: dict[str, Any]
    t0: float
    t_end: float
    total_gpus: int
    storage_bw: dict[str, float]
    jobs: list[dict[str, Any]]
    evictions: list[dict[str, Any]]
    storms: list[dict[str, Any]]
    samples: dict[str, list[float]]
    totals: dict[str, float]
    planner_calls: int
    planner_wall_s: float
    planner_max_wall_s: float
    wall_s: float
    plan_errors: list[str] = field(default_factory=list)
    # pending time by "tier:reason" of the plan that left the job pending (job-seconds)
    wait_by_reason_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SimResult:
        return cls(**d)


class Simulator:
    """One simulation run (see the module docstring)."""

    def __init__(self, cluster: Snapshot, trace: list[TraceJob], config: SimConfig | None = None,
                 policy: Policy | None = None,
                 planner: Callable[[Snapshot], Plan] | None = None):
        self.cfg = config or SimConfig()
        self.cluster = cluster
        self.policy = policy or cluster.policy
        self.plan_fn = planner or get_planner(self.cfg)
        # called after each planner call with the call's number (from 1), the snapshot,
        # the plan and the call's wall seconds (simulate --dump-ticks)
        self.on_tick: Callable[[int, Snapshot, Plan, float], None] | None = None
        self.nodes = {n.id: n for n in cluster.nodes}
        self.storage = cluster.storage_map()
        self.node_storage: dict[str, str | None] = {}
        for n in cluster.nodes:
            st = cluster.storage_of(n)
            self.node_storage[n.id] = st.id if st else None
        self.total_gpus = sum(n.gpus for n in cluster.nodes if n.state != "down")
        jobs = sorted(trace, key=lambda j: (j.submit, j.id))
        if self.cfg.start is not None:
            jobs = [j for j in jobs if j.submit >= self.cfg.start]
        self.t0 = self.cfg.start if self.cfg.start is not None else (jobs[0].submit if jobs else 0.0)
        self.t_stop = math.inf if self.cfg.days is None else self.t0 + self.cfg.days * 86400.0
        jobs = [j for j in jobs if j.submit < self.t_stop]
        self.jobs = [_SJ(s, i) for i, s in enumerate(jobs)]
        bad = sorted({j.tier for j in jobs} - set(self.policy.tiers))
        if bad:
            from models import InputError

            raise InputError([f"trace: tier(s) {bad} not in the policy"])
        self.owner: dict[str, list[int]] = {n.id: [-1] * n.gpus for n in cluster.nodes}
        self.hold: dict[str, list[float]] = {n.id: [0.0] * n.gpus for n in cluster.nodes}
        self.running: set[int] = set()
        self.stopping: set[int] = set()
        self.pending: set[int] = set()
        self.events: list[tuple[float, int, int, int, int]] = []
        self.wakes: list[float] = []
        # the minutes of the day at which a tier's window opens or closes (R8)
        self._window_edges = sorted({minutes_of(x) % 1440 for t in self.policy.tiers.values()
                                     for w in t.windows for x in (w.start, w.end)})
        self._edge_woken: float | None = None
        self.seq = 0
        teams = sorted({j.team or "-" for j in jobs})
        self.team_usage = {t: 0.0 for t in teams}
        self.team_alloc = {t: 0 for t in teams}
        self.fs_time = self.t0
        self.periodic_rate: dict[str, float] = defaultdict(float)
        self.totals = {"useful_gpu_s": 0.0, "lost_gpu_s": 0.0, "restore_gpu_s": 0.0,
                       "flush_gpu_s": 0.0, "run_gpu_s": 0.0}
        self.eviction_log: list[dict[str, Any]] = []
        # (time, record) of every eviction, for the snapshots' recent_evictions (R15)
        self.history_log: list[tuple[float, RecentEviction]] = []
        self.storm_log: list[dict[str, Any]] = []
        self.samples: dict[str, list[float]] = {k: [] for k in (
            "t", "alloc_gpus", "running", "pending", "evictions", "placements",
            "periodic_gb_per_s")}
        self.plan_errors: list[str] = []
        # why pending jobs waited: each job a plan deferred waits, for the reason the
        # plan gave, until the next planner call (or the end of the run)
        self.wait_by_reason: dict[str, float] = {}
        self._deferred_at: tuple[float, list[str]] | None = None
        self.calls = 0
        self.call_wall = 0.0
        self.call_max = 0.0
        self._node_list = cluster.nodes
        self._storage_list = cluster.storage
        for j in self.jobs:
            self._push(j.submit, _ARRIVE, j)

    # ------------------------------------------------------------ events

    def _push(self, t: float, kind: int, j: _SJ) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, j.idx, j.version))

    def _wake(self, t: float) -> None:
        heapq.heappush(self.wakes, t)

    def _next_window_edge(self, now: float) -> float | None:
        """The first time after ``now`` at which a tier's preemption window (R8) opens
        or closes (any day: a day a window does not cover only costs a planner call),
        or None without windows: a plan may change there though nothing else
        happens."""
        if not self._window_edges:
            return None
        midnight = now - now % 86400.0  # (UTC: epoch seconds count no leap seconds)
        for day in (0.0, 86400.0):
            for minute in self._window_edges:
                t = midnight + day + 60.0 * minute
                if t > now:
                    return t
        return None

    def _process_events(self, now: float) -> bool:
        changed = False
        while self.events and self.events[0][0] <= now:
            t, kind, _, idx, version = heapq.heappop(self.events)
            j = self.jobs[idx]
            if version != j.version:
                continue
            changed = True
            if kind == _ARRIVE:
                j.state = "pending"
                j.queued_at = t
                self.pending.add(idx)
            elif kind == _RELEASE:
                self.stopping.discard(idx)
                j.state = "pending"
                j.queued_at = t
                j.last_preempted_at = t
                j.history.append(("release", t))
                self.pending.add(idx)
                self._wake(t + self.policy.backoff.cooldown(j.preemptions))
                if self.policy.cascade_guard_s > 0:
                    self._wake(t + self.policy.cascade_guard_s)
            elif kind == _COMPLETE:
                self._close_segment(j, t)
                j.progress = j.spec.duration_s
                j.state = "done"
                j.done_at = t
                j.history.append(("done", t))
                self._free(j, t)
                self.running.discard(idx)
        while self.wakes and self.wakes[0] <= now:
            heapq.heappop(self.wakes)
            changed = True
        return changed

    def _next_time(self) -> float | None:
        cands = []
        while self.events:
            t, _, _, idx, version = self.events[0]
            if version != self.jobs[idx].version:
                heapq.heappop(self.events)
                continue
            cands.append(t)
            break
        if self.wakes:
            cands.append(self.wakes[0])
        return min(cands) if cands else None

    # ------------------------------------------------------------ GPU bookkeeping

    def _free(self, j: _SJ, t: float, hold_until: float = 0.0) -> None:
        for nid, gpus in j.placement:
            own, hold = self.owner[nid], self.hold[nid]
            for g in gpus:
                if own[g] == j.idx:
                    own[g] = -1
                    # (a job evicted before it started leaves its victim's hold: the
                    # GPUs are free when the last of them is)
                    hold[g] = max(hold[g], hold_until)
        team = j.spec.team or "-"
        self.team_alloc[team] -= j.gpus
        st = self._storage_of(j)
        if st is not None and j.spec.checkpoint_interval_s > 0:
            self.periodic_rate[st] -= j.spec.checkpoint_gb / j.spec.checkpoint_interval_s
        j.placement = []

    def _storage_of(self, j: _SJ) -> str | None:
        return self.node_storage[j.placement[0][0]] if j.placement else None

    def _close_segment(self, j: _SJ, t: float) -> float:
        """Account a run segment ending at ``t``; returns the progress reached."""
        end = max(t, j.seg_start)
        self.totals["run_gpu_s"] += j.gpus * (end - j.seg_start)
        self.totals["restore_gpu_s"] += j.gpus * max(0.0, min(end, j.seg_run) - j.seg_start)
        return j.progress_at(end)

    # ------------------------------------------------------------ snapshots

    def _priority(self, j: _SJ, now: float, total: float) -> int:
        if not self.cfg.fairshare:
            return int(j.spec.priority)
        fair = 1.0 / max(1, len(self.team_usage))
        used = self.team_usage.get(j.spec.team or "-", 0.0) / total if total > 0 else 0.0
        fs = 2.0 ** (-used / fair)
        age = min(1.0, max(0.0, now - j.queued_at) / AGE_FULL_S)
        return int(j.spec.priority) * 1000 + round(FAIRSHARE_WEIGHT * fs) + round(AGE_WEIGHT * age)

    def _update_fairshare(self, now: float) -> None:
        dt = now - self.fs_time
        if dt <= 0:
            return
        decay = 2.0 ** (-dt / self.cfg.halflife_s)
        for t in self.team_usage:
            self.team_usage[t] = self.team_usage[t] * decay + self.team_alloc[t] * dt
        self.fs_time = now

    def _job_record(self, j: _SJ, now: float) -> Job:
        s = j.spec
        if j.state == "running":
            _, last = j.periodic_at(now)
            started = min(j.seg_start, now)
            began = _began(j, started)  # started_at in the snapshot
            if began != started:  # (what it did before the start counts as saved)
                last = started if last is None else last
            key: tuple = ("r", j.version, last, began)
        else:
            last, started, began = None, None, None
            key = ("p", j.version, j.run_priority, j.preemptions, j.last_preempted_at)
        if key == j.cache_key and j.cache_obj is not None:
            return j.cache_obj
        d: dict[str, Any] = {
            "id": s.id, "tier": s.tier, "priority": j.run_priority, "team": s.team,
            "state": j.state, "gpus_per_node": s.gpus_per_node, "nodes": s.nodes,
            "gpu_type": s.gpu_type, "topology": s.topology,
            "checkpoint": {"size_gb": s.checkpoint_gb, "signal": s.signal,
                           "barrier_s": s.barrier_s, "cleanup_s": s.cleanup_s,
                           "restore_s": s.restore_s,
                           "last_at": _dt(last) if last is not None else None},
            "preemptions": j.preemptions,
            "last_preempted_at": (_dt(j.last_preempted_at)
                                  if j.last_preempted_at is not None else None),
            "submitted_at": _dt(j.submit),
        }
        if j.state == "running" and began is not None:
            d["started_at"] = _dt(began)
            d["placement"] = [{"node": n, "gpus": list(g)} for n, g in j.placement]
            if self.cfg.time_limits and s.time_limit_s is not None:
                # Slurm's EndTime: the start of this run plus the job's time limit
                d["expected_end_at"] = _dt(j.seg_start + s.time_limit_s)
        obj = Job.model_validate(d)
        j.cache_key, j.cache_obj = key, obj
        return obj

    def snapshot(self, now: float) -> Snapshot:
        """The contract snapshot the planner sees at ``now``."""
        recs = []
        for idx in sorted(self.running):
            recs.append(self._job_record(self.jobs[idx], now))
        total = sum(self.team_usage.values())
        for idx in sorted(self.pending):
            j = self.jobs[idx]
            j.run_priority = self._priority(j, now, total)
            recs.append(self._job_record(j, now))
        return Snapshot(version=1, now=_dt(now), storage=self._storage_list, nodes=self._node_list,
                        jobs=recs, policy=self.policy, recent_evictions=self._recent(now),
                        comment=None)

    def _recent(self, now: float) -> list[RecentEviction]:
        """R15's history: the evictions carried out in the window before ``now``."""
        th = self.policy.thrash
        if th is None:
            return []
        log, start = self.history_log, now - th.window_s
        out = []
        for t, rec in reversed(log):  # (in time order: the newest last)
            if t < start:
                break
            if t < now:
                out.append(rec)
        out.reverse()
        return out

    # ------------------------------------------------------------ executing a plan

    def _eligible(self, now: float) -> bool:
        """Some pending job could start now (not held by a backoff)."""
        if self.cfg.planner == "naive":
            return bool(self.pending)
        for idx in self.pending:
            j = self.jobs[idx]
            if j.preemptions < 1 or j.last_preempted_at is None:
                return True
            if now >= j.last_preempted_at + self.policy.backoff.cooldown(j.preemptions):
                return True
        return False

    def _error(self, msg: str) -> None:
        if self.cfg.strict:
            raise SimulationError(msg)
        self.plan_errors.append(msg)

    def _apply(self, plan: Plan, now: float) -> tuple[int, int]:
        by_id = {self.jobs[i].spec.id: i for i in self.running | self.pending}
        victims: list[tuple[_SJ, float, list[str]]] = []
        evicted: set[str] = set()
        for e in plan.evictions:
            idx = by_id.get(e.job)
            if idx is None or self.jobs[idx].state != "running":
                self._error(f"t={now}: plan evicts {e.job!r}, which is not running")
                continue
            if e.job in evicted:
                self._error(f"t={now}: plan evicts {e.job!r} twice")
                continue
            evicted.add(e.job)
            victims.append((self.jobs[idx], float(e.grace_s), list(e.preemptors)))
        self._evict(victims, now)
        placed = 0
        for p in plan.placements:
            idx = by_id.get(p.job)
            if idx is None or self.jobs[idx].state != "pending" or p.job in evicted:
                self._error(f"t={now}: plan places {p.job!r}, which is not pending")
                continue
            j = self.jobs[idx]
            parts = [(part.node, list(part.gpus)) for part in p.placement]
            ok = len(parts) == j.spec.nodes and all(
                len(g) == j.spec.gpus_per_node and n in self.owner
                and all(0 <= x < len(self.owner[n]) and self.owner[n][x] == -1 for x in g)
                for n, g in parts)
            if not ok:
                self._error(f"t={now}: plan places {p.job!r} on {parts}, not all free")
                continue
            self._start(j, parts, now)
            placed += 1
        return len(victims), placed

    def _start(self, j: _SJ, parts: list[tuple[str, list[int]]], now: float) -> None:
        # (the plan's start_after_s is its upper bound for this: the largest grace)
        start = now
        for n, gpus in parts:
            own, hold = self.owner[n], self.hold[n]
            for g in gpus:
                own[g] = j.idx
                start = max(start, hold[g])
        j.placement = parts
        j.state = "running"
        j.version += 1
        j.seg_place = now
        j.seg_start = start
        j.seg_run = start + (j.spec.restore_s if j.preemptions > 0 else 0.0)
        j.seg_p0 = j.progress
        j.wait_s += start - j.queued_at
        if j.first_start is None:
            j.first_start = start
        j.history.append(("start", start))
        self.pending.discard(j.idx)
        self.running.add(j.idx)
        self.team_alloc[j.spec.team or "-"] += j.gpus
        st = self._storage_of(j)
        if st is not None and j.spec.checkpoint_interval_s > 0:
            self.periodic_rate[st] += j.spec.checkpoint_gb / j.spec.checkpoint_interval_s
        self._push(j.seg_run + (j.spec.duration_s - j.progress), _COMPLETE, j)
        tier = self.policy.tiers[j.spec.tier]
        if tier.preemptible and tier.min_runtime_s > 0:  # (R6 ends: a plan may differ)
            self._wake(_began(j, start) + tier.min_runtime_s)

    def _evict(self, victims: list[tuple[_SJ, float, list[str]]], now: float) -> None:
        if not victims:
            return
        load: dict[str, float] = defaultdict(float)
        info: dict[str, dict[str, Any]] = {}
        for j, grace, _ in victims:
            st = self._storage_of(j)
            if j.spec.signal is not None and st is not None and j.seg_start <= now:
                load[st] += j.spec.checkpoint_gb
                d = info.setdefault(st, {"victims": 0, "lost": 0, "min_window": math.inf})
                d["victims"] += 1
                d["min_window"] = min(d["min_window"],
                                      max(1.0, grace - j.spec.barrier_s - j.spec.cleanup_s))
        for j, grace, preemptors in victims:
            s = j.spec
            st = self._storage_of(j)
            # a job placed on GPUs its own victims still hold has not started: it has
            # nothing to flush or lose and exits at once, and its wait goes on
            unstarted = j.seg_start > now
            if unstarted:
                j.wait_s -= j.seg_start - now
                if j.first_start is not None and j.first_start >= j.seg_start:
                    j.first_start = None
                j.history = [(k, t) for k, t in j.history if not (k == "start" and t > now)]
            p = self._close_segment(j, now)
            saved_p, _ = j.periodic_at(now)
            flush = None
            if s.signal is not None and not unstarted:
                shared = load[st] / self.storage[st].write_gb_per_s if st is not None else 0.0
                local = 0.0
                shard = s.checkpoint_gb / s.nodes
                for nid, _ in j.placement:
                    bw = self.nodes[nid].local_write_gb_per_s
                    if bw:
                        local = max(local, shard / bw)
                flush = max(shared, local) + s.barrier_s + s.cleanup_s
            saved = flush is not None and flush <= grace + 1e-9
            keep = p if saved or unstarted else saved_p
            lost = max(0.0, p - keep)
            if not saved and st is not None and st in info and s.signal is not None:
                info[st]["lost"] += 1
            # the grace is a deadline: a saved flush ends the job early, a failed one is
            # killed at the deadline, one without a trap stops at once (teardown)
            held = (0.0 if unstarted else flush if saved and flush is not None
                    else grace if s.signal is not None else min(grace, s.cleanup_s))
            exit_at = now + held
            self.totals["lost_gpu_s"] += j.gpus * lost
            self.totals["flush_gpu_s"] += j.gpus * min(held, max(0.0, self.t_stop - now))
            # streak: evictions with less than streak_reset_s of progress between them
            if p - j.seg_p0 >= self.cfg.streak_reset_s:
                j.streak = 0
            j.streak += 1
            j.max_streak = max(j.max_streak, j.streak)
            cascade = any(
                (pj := self._by_id(pid)) is not None and pj.last_evicted_at is not None
                and now - pj.last_evicted_at < self.cfg.cascade_window_s
                for pid in preemptors)
            self.eviction_log.append({
                "t": now, "job": s.id, "tier": s.tier, "gpus": j.gpus, "grace_s": grace,
                "flush_s": flush, "saved": saved, "signal": s.signal, "lost_gpu_s": j.gpus * lost,
                "storage": st, "preemptors": preemptors, "cascade": cascade,
                "preemptor_tiers": sorted({pj.spec.tier for pid in preemptors
                                           if (pj := self._by_id(pid)) is not None}),
                "exit_s": held, "preemptions": j.preemptions + 1})
            self.history_log.append((now, RecentEviction(job=s.id, at=_dt(now), gpus=j.gpus)))
            self._free(j, now, hold_until=exit_at)
            j.progress = keep
            j.preemptions += 1
            j.last_evicted_at = now
            j.history.append(("evict", now))
            j.state = "stopping"
            j.version += 1
            self.running.discard(j.idx)
            self.stopping.add(j.idx)
            j.exit_at = exit_at
            self._push(exit_at, _RELEASE, j)
        for st, gb in load.items():
            d = info[st]
            bw = self.storage[st].write_gb_per_s
            self.storm_log.append({
                "t": now, "storage": st, "flush_gb": gb, "flush_s": gb / bw,
                "victims": d["victims"], "lost": d["lost"],
                "required_gb_per_s": gb / d["min_window"], "bandwidth_gb_per_s": bw})

    def _by_id(self, jid: str) -> _SJ | None:
        if not hasattr(self, "_ids"):
            self._ids = {j.spec.id: j for j in self.jobs}
        return self._ids.get(jid)

    # ------------------------------------------------------------ main loop

    def _sample(self, now: float, evictions: int, placed: int) -> None:
        # GPUs held: a placed job from its start (before that its GPUs are still its
        # victims'), a victim until it exits
        alloc = 0
        for idx in self.running:
            j = self.jobs[idx]
            if j.seg_start <= now:
                alloc += j.gpus
        for idx in self.stopping:
            alloc += self.jobs[idx].gpus
        s = self.samples
        s["t"].append(now)
        s["alloc_gpus"].append(alloc)
        s["running"].append(len(self.running) + len(self.stopping))
        s["pending"].append(len(self.pending))
        s["evictions"].append(evictions)
        s["placements"].append(placed)
        s["periodic_gb_per_s"].append(round(sum(self.periodic_rate.values()), 6))

    def run(self, progress: Callable[[float, float], None] | None = None) -> SimResult:
        wall0 = time.perf_counter()
        tick = self.cfg.tick_s
        k = 0
        now = self.t0
        dirty = False
        last = now
        horizon = (self.t_stop if self.t_stop < math.inf else self._horizon_guess()) - self.t0
        while now <= self.t_stop:
            self._update_fairshare(now)  # usage since the last tick, before it changes
            if self._process_events(now):
                dirty = True
            ev = placed = 0
            if dirty and self.pending and self._eligible(now):
                snap = self.snapshot(now)
                c0 = time.perf_counter()
                plan = self.plan_fn(snap)
                w = time.perf_counter() - c0
                self.calls += 1
                self.call_wall += w
                self.call_max = max(self.call_max, w)
                if self.on_tick is not None:
                    self.on_tick(self.calls, snap, plan, w)
                self._count_waits(now)
                self._deferred_at = (now, [f"{j.spec.tier}:{d.reason}" for d in plan.deferred
                                           if (j := self._by_id(d.job)) is not None])
                ev, placed = self._apply(plan, now)
                dirty = bool(ev or placed or any(d.reason in ("STORM", "BUDGET")
                                                 for d in plan.deferred))
                for d in plan.deferred:  # the planner says when these may change
                    if d.reason in _WAIT_UNTIL and d.until is not None:
                        self._wake(d.until.timestamp())
                edge = self._next_window_edge(now)  # (R8: a tier's window opens or closes)
                if edge is not None and edge != self._edge_woken:
                    self._wake(edge)
                    self._edge_woken = edge
            else:
                dirty = False
            self._sample(now, ev, placed)
            last = now
            if progress is not None:
                progress(min(now - self.t0, horizon), horizon)
            if dirty:
                k += 1
            else:
                nxt = self._next_time()
                if nxt is None:
                    break
                k = max(k + 1, math.ceil((nxt - self.t0) / tick - 1e-9))
            now = self.t0 + k * tick
        if self.t_stop < math.inf:
            t_end = self.t_stop
            self._process_events(t_end)
        else:
            t_end = max([last] + [j.done_at for j in self.jobs if j.done_at is not None])
        return self._finish(t_end, time.perf_counter() - wall0)

    def _count_waits(self, now: float) -> None:
        if self._deferred_at is not None:
            t, keys = self._deferred_at
            for key in keys:
                self.wait_by_reason[key] = self.wait_by_reason.get(key, 0.0) + (now - t)
        self._deferred_at = None

    def _horizon_guess(self) -> float:
        return max((j.submit for j in self.jobs), default=self.t0) + 1.0

    def _finish(self, t_end: float, wall: float) -> SimResult:
        self._count_waits(t_end)
        for idx in sorted(self.running):
            j = self.jobs[idx]
            if j.seg_start > t_end:  # placed, waiting for its victims to exit at the end:
                # it waited up to t_end, and has not started
                j.wait_s -= j.seg_start - t_end
                if j.first_start is not None and j.first_start > t_end:
                    j.first_start = None
                j.history = [(k, t) for k, t in j.history if not (k == "start" and t > t_end)]
            j.progress = self._close_segment(j, t_end)
        # useful work: progress kept at the end (completed, saved, or running)
        self.totals["useful_gpu_s"] = sum(j.gpus * j.progress for j in self.jobs)
        jobs = []
        for j in self.jobs:
            s = j.spec
            jobs.append({
                "id": s.id, "tier": s.tier, "team": s.team, "gpus": j.gpus, "submit": j.submit,
                "duration_s": s.duration_s, "first_start": j.first_start, "done_at": j.done_at,
                "wait_s": j.wait_s + (t_end - j.queued_at if j.state == "pending" else 0.0),
                "started": j.first_start is not None, "preemptions": j.preemptions,
                "max_streak": j.max_streak, "progress_s": j.progress, "state": j.state,
                "carry_over": bool(s.extra.get("carry_over")),
                "history": [[k, t] for k, t in j.history]})
        storage_bw = {s.id: s.write_gb_per_s for s in self._storage_list}
        return SimResult(
            config=self.cfg.to_json(), t0=self.t0, t_end=t_end, total_gpus=self.total_gpus,
            storage_bw=storage_bw, jobs=jobs, evictions=self.eviction_log, storms=self.storm_log,
            samples=self.samples, totals=dict(self.totals), planner_calls=self.calls,
            planner_wall_s=self.call_wall, planner_max_wall_s=self.call_max, wall_s=wall,
            plan_errors=self.plan_errors,
            wait_by_reason_s={k: round(v, 3) for k, v in sorted(self.wait_by_reason.items())})


def simulate(cluster: Snapshot, trace: list[TraceJob], config: SimConfig | None = None,
             policy: Policy | None = None, planner: Callable[[Snapshot], Plan] | None = None,
             progress: Callable[[float, float], None] | None = None) -> SimResult:
    """Run one simulation and return its record."""
    return Simulator(cluster, trace, config, policy, planner).run(progress)
