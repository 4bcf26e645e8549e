"""Reading Slurm and the tick loop: snapshot, plan, apply, repeat.

One tick: ``squeue --json`` and the node listing (``sinfo -N --json`` on 22.05,
``scontrol show nodes --json`` on 23.02+), the contract snapshot, the plan, its
application, one log line. The loop stops after ``--ticks N`` or on
SIGINT/SIGTERM: the tick in progress is finished first (so no victim is left
signalled but not requeued); a second signal stops at once, after requeue-holding
the victims the tick already signalled and saving the state file (the pins,
preemption times and evictions it carried out).

Unless it is a dry run, the loop holds the state file's lock
(``<state_file>.lock``) for its life: a second ``slurm run`` or a ``slurm apply``
with the same state file fails at once (status 2).

The loop refuses to start with a config that maps no job to a tier, and stops
(status 2) when the first tick that sees GPU jobs in squeue maps none of them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.adapters.slurm.apply import ApplyReport, Runner, apply_plan, subprocess_runner
from planner.adapters.slurm.config import ConfigError, SlurmConfig
from planner.adapters.slurm.parse import ParseResult, build_snapshot
from planner.adapters.slurm.scalars import iso
from planner.adapters.slurm.state import (
    AdapterState,
    StateFileError,
    StateLockError,
    load_locked,
)
from planner.trap import atomic_write

if TYPE_CHECKING:
    from planner import Loop

log = logging.getLogger("planner.slurm")


class SlurmError(RuntimeError):
    """A Slurm command needed for the snapshot failed."""


class PlanDirError(RuntimeError):
    """A tick's record could not be written into the plan folder."""


NO_STATE_FILE = ("no state_file in the config: the evictions of the last hour (R15), the "
                 "times of the last preemptions (R9) and the planner's pins are kept in "
                 "memory only; a restart forgets them and may evict a full budget again")


def _json_command(argv: list[str], runner: Runner, timeout: float) -> dict[str, Any]:
    rc, out, err = runner(argv, timeout)
    if rc != 0:
        raise SlurmError(f"{' '.join(argv)} failed (rc {rc}): {err.strip()[:500]}")
    try:
        data = json.loads(out)
    except json.JSONDecodeError as exc:
        raise SlurmError(f"{' '.join(argv)}: output is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise SlurmError(f"{' '.join(argv)}: output is not a JSON object")
    errors = [e for e in data.get("errors") or [] if e]
    if errors:
        log.warning("slurm: %s reported errors: %s", argv[0], errors)
    return data


def _major(release: str) -> int:
    try:
        return int(release.split(".")[0])
    except ValueError:
        return 0


def read_slurm(cfg: SlurmConfig, runner: Runner = subprocess_runner
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(squeue JSON, node JSON) from the live cluster."""
    from planner.adapters.slurm.parse import slurm_version

    t = cfg.command_timeout_s
    squeue = _json_command([cfg.commands.squeue, "--all", "--json"], runner, t)
    source = cfg.node_source
    if source == "auto":
        source = "scontrol" if _major(slurm_version(squeue)) >= 23 else "sinfo"
    if source == "scontrol":
        try:
            return squeue, _json_command([cfg.commands.scontrol, "show", "nodes", "--json"],
                                         runner, t)
        except SlurmError as exc:
            if cfg.node_source == "scontrol":
                raise
            log.warning("slurm: %s; falling back to sinfo --json", exc)
    # -N: one record per node also in 23.02+'s data_parser output (whose default
    # groups nodes, so a group's gres_used would not be any one node's)
    return squeue, _json_command([cfg.commands.sinfo, "-N", "--json"], runner, t)


def take_snapshot(cfg: SlurmConfig, state: AdapterState | None = None, *,
                  runner: Runner = subprocess_runner,
                  clock: Callable[[], float] = time.time) -> ParseResult:
    """The contract snapshot of the live cluster (a plain dict; not yet validated)."""
    squeue, nodes = read_slurm(cfg, runner)
    return build_snapshot(squeue, nodes, cfg, now=clock(), state=state,
                          sources=(f"{cfg.commands.squeue} --all --json",
                                   "the node listing (sinfo/scontrol --json)"))


def _running_pieces(snapshot: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(Slurm job id, record) of each running piece of `snapshot` that is a Slurm job
    (not GPUs Slurm holds for no job it lists, which are never victims). A snapshot
    given by hand is checked no further: what is not a job record is skipped."""
    jobs = snapshot.get("jobs")
    for job in jobs if isinstance(jobs, list) else []:
        if not isinstance(job, dict) or job.get("state") != "running":
            continue
        meta = job.get("_slurm")
        if not isinstance(meta, dict):
            meta = {}
        if not meta.get("synthetic"):
            yield str(meta.get("job_id", job.get("id"))), job


def expected_nodes(snapshot: dict[str, Any]) -> dict[str, set[str]]:
    """Slurm job id -> the nodes its running pieces hold in `snapshot` (for the
    re-check of victims just before they are signalled)."""
    out: dict[str, set[str]] = {}
    for jid, job in _running_pieces(snapshot):
        placement = job.get("placement")
        out.setdefault(jid, set()).update(
            str(p["node"]) for p in (placement if isinstance(placement, list) else [])
            if isinstance(p, dict) and isinstance(p.get("node"), str))
    return out


def running_gpus(snapshot: dict[str, Any]) -> dict[str, int]:
    """Slurm job id -> the GPUs its running pieces hold in `snapshot` (summed), for
    the evictions the state file keeps (R15's GPU budget). Pieces whose counts are
    not whole numbers are left out."""
    out: dict[str, int] = {}
    for jid, job in _running_pieces(snapshot):
        per, count = job.get("gpus_per_node"), job.get("nodes", 1)
        if type(per) is int and type(count) is int:
            out[jid] = out.get(jid, 0) + per * count
    return out

NO_SNAPSHOT_GPUS = ("no --snapshot: the evictions are kept in the state file without their "
                    "GPUs, so the next snapshots count them toward the window's eviction "
                    "count but not toward thrash.max_gpu_fraction (give --snapshot FILE, the "
                    "snapshot the plan was made from)")


@dataclass
class TickResult:
    snapshot: dict[str, Any]
    plan: Any
    report: ApplyReport
    seconds: float
    notes: int = 0
    warnings: int = 0

    def summary(self) -> str:
        jobs = self.snapshot.get("jobs", [])
        running = sum(j["state"] == "running" for j in jobs)
        pending = len(jobs) - running
        p = self.plan
        status = getattr(p, "status", None) or "?"
        ev = len(getattr(p, "evictions", []) or [])
        pl = len(getattr(p, "placements", []) or [])
        fails = len(self.report.failures) + len(self.report.problems)
        mode = " (dry run)" if self.report.dry_run else ""
        left = f" ({self.notes} note(s), see --log-level DEBUG)" if self.notes else ""
        warned = f", {self.warnings} warning(s)" if self.warnings else ""
        return (f"{running} running, {pending} pending{left}; plan {status}: {ev} eviction(s), "
                f"{pl} placement(s); {fails} failure(s){warned}; {self.seconds:.1f} s{mode}")


def tick(cfg: SlurmConfig, state: AdapterState, *, dry_run: bool = False,
         runner: Runner = subprocess_runner, clock: Callable[[], float] = time.time,
         sleep: Callable[[float], None] = time.sleep,
         echo: Callable[[str], None] | None = None, number: int = 0,
         require_mapping: bool = False, seen_warnings: set[str] | None = None,
         loop: Loop | None = None) -> TickResult:
    """One tick: snapshot, plan, apply (``loop``: the loop's planner.Loop, which
    takes over from the last tick what did not change). Raises SlurmError /
    InputError on failure (TierMappingError when `require_mapping` and squeue lists
    GPU jobs of which the config maps none).

    The snapshot's warnings (GPUs held by jobs it cannot see, unknown GPU models,
    ...) are logged, and the plan carries them (the snapshot's ``warnings``, which
    plan() copies into the plan's); a warning already in `seen_warnings` (the
    previous tick's) is logged at DEBUG only.
    """
    from models import load_snapshot
    from planner import plan as make_plan
    from planner import warm_up
    from planner.adapters.slurm.parse import unmapped_jobs_error

    if cfg.planner.planner == "cpsat":  # (once per process, not in the plan's time limit)
        warm_up(cfg.planner.deterministic)
    t0 = time.monotonic()
    parsed = take_snapshot(cfg, state, runner=runner, clock=clock)
    if require_mapping:
        err = unmapped_jobs_error(parsed)
        if err is not None:
            raise err
    for note in parsed.notes:
        log.debug("slurm: %s", note)
    for warning in parsed.warnings:
        repeated = seen_warnings is not None and warning in seen_warnings
        log.log(logging.DEBUG if repeated else logging.WARNING, "slurm: %s", warning)
    if seen_warnings is not None:
        seen_warnings.clear()
        seen_warnings.update(parsed.warnings)
    snap = load_snapshot(parsed.snapshot) if loop is None else \
        loop.loader.load(parsed.snapshot)
    p = make_plan(snap, time_limit_s=cfg.planner.time_limit_s,
                  deterministic=cfg.planner.deterministic, workers=cfg.planner.workers,
                  planner=cfg.planner.planner, loop=loop)
    gpus = running_gpus(parsed.snapshot)  # Slurm job -> GPUs (pieces of one job summed)
    # the plan was made from this very snapshot a moment ago: fresh by construction
    try:
        report = apply_plan(p, cfg, dry_run=dry_run, state=state, runner=runner,
                            clock=clock, sleep=sleep, echo=echo, gpus=gpus, fresh=True,
                            expected_nodes=expected_nodes(parsed.snapshot))
    except BaseException:
        # interrupted (a second SIGINT/SIGTERM) or failed: the pins, preemption
        # times and evictions it carried out so far are kept all the same
        if not dry_run:
            save_after_failure(state)
        raise
    for warning in report.warnings:
        log.warning("slurm: %s", warning)
    if not dry_run:
        try:
            # forget jobs Slurm no longer lists at all (held jobs are not in the
            # snapshot but still known, so ask squeue rather than the snapshot)
            known = _known_ids(runner, cfg)
            if known is not None:
                state.forget_except(known)
        finally:
            state.save()
    result = TickResult(parsed.snapshot, p, report, time.monotonic() - t0, len(parsed.notes),
                        len(parsed.warnings))
    if cfg.plan_dir is not None:
        try:
            _write_tick(cfg.plan_dir, number, clock(), result)
        except OSError as exc:
            raise PlanDirError(f"plan_dir {cfg.plan_dir}: cannot write the tick's record: "
                               f"{exc.strerror or exc}") from None
    return result


def save_after_failure(state: AdapterState) -> None:
    """Save `state` while an exception is on its way out: a file that cannot be
    written is logged, not raised (the exception in flight, e.g. the
    KeyboardInterrupt of a second signal, goes on)."""
    try:
        state.save()
    except StateFileError as exc:
        log.error("slurm: the adapter state was not saved: %s", exc)


def _known_ids(runner: Runner, cfg: SlurmConfig) -> set[str] | None:
    rc, out, _ = runner([cfg.commands.squeue, "--noheader", "--all", "--format=%A"],
                        cfg.command_timeout_s)
    if rc != 0:
        return None
    return {line.strip() for line in out.splitlines() if line.strip()}


def plan_dir_problem(directory: Path) -> str | None:
    """Create the folder the ticks are written into (with its parents); what is
    wrong when it cannot be created or written, else None."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create the folder {directory}: {exc.strerror or exc}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"folder {directory} is not writable"
    return None


def _write_tick(directory: Path, number: int, now: float, result: TickResult) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = iso(now).replace(":", "")
    plan = result.plan.model_dump(mode="json") if hasattr(result.plan, "model_dump") \
        else result.plan
    doc = {"tick": number, "snapshot": result.snapshot, "plan": plan,
           "apply": result.report.to_dict()}
    path = directory / f"tick-{number:05d}-{stamp}.json"
    atomic_write(path, (json.dumps(doc, indent=1) + "\n").encode())


class _StopFlag:
    """Set by the first SIGINT/SIGTERM; the second one interrupts at once."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        log.info("slurm: %s received; stopping after the current tick",
                 signal.Signals(signum).name)
        self.event.set()


def run_loop(cfg: SlurmConfig, *, interval_s: float | None = None, ticks: int | None = None,
             dry_run: bool = False, runner: Runner = subprocess_runner,
             echo: Callable[[str], None] | None = None,
             stop: threading.Event | None = None, plan_dir_name: str = "plan_dir") -> int:
    """Tick every `interval_s` until `ticks` are done or a stop signal; exit status.

    A failing tick (Slurm unreachable, bad snapshot) is logged and the loop goes
    on; the status is 1 if the last tick failed or reported failures, else 0. A
    state file that cannot be read, or whose lock another `slurm run` or `slurm
    apply` holds, is status 2 before any tick (the lock is held until the loop
    ends; a dry run takes none); so is a plan folder that cannot be created or
    written (`plan_dir_name` names it: ``--plan-dir`` when the option gave it).
    """
    from planner.adapters.slurm.parse import tier_mapping_error, tier_policy_error

    interval = cfg.interval_s if interval_s is None else interval_s
    refused = tier_mapping_error(cfg) or tier_policy_error(cfg)
    if refused is not None:
        log.error("slurm: %s", "; ".join(refused.errors))
        return 2
    try:
        cfg.policy_dict()  # (a policy_file unreadable, or using the unmanaged tier)
    except ConfigError as exc:
        log.error("slurm: %s", exc)
        return 2
    if cfg.state_file is None:
        log.warning("slurm: %s", NO_STATE_FILE)
    with ExitStack() as held:
        try:  # (a second `slurm run` or a `slurm apply` holding the lock: fails fast)
            state = load_locked(held, cfg.state_file, lock=not dry_run)
        except (StateLockError, StateFileError) as exc:
            log.error("slurm: %s", exc)
            return 2
        problem = plan_dir_problem(Path(cfg.plan_dir)) if cfg.plan_dir is not None else None
        if problem:
            log.error("slurm: %s: %s", plan_dir_name, problem)
            return 2
        return _loop(cfg, state, interval, ticks, dry_run, runner, echo, stop)


def _loop(cfg: SlurmConfig, state: AdapterState, interval: float, ticks: int | None,
          dry_run: bool, runner: Runner, echo: Callable[[str], None] | None,
          stop: threading.Event | None) -> int:
    from planner.adapters.slurm.parse import TierMappingError

    flag = _StopFlag()
    if stop is not None:
        flag.event = stop
    flag.install()
    from planner import Loop

    loop = Loop()  # (each tick takes over what the last did not change)
    status = 0
    n = 0
    mapping_seen = False  # a tick has seen GPU jobs the config maps
    seen: set[str] = set()
    try:
        while not flag.event.is_set() and (ticks is None or n < ticks):
            n += 1
            start = time.monotonic()
            try:
                result = tick(cfg, state, dry_run=dry_run, runner=runner, echo=echo, number=n,
                              require_mapping=not mapping_seen, seen_warnings=seen,
                              loop=loop)
            except TierMappingError as exc:
                # the first tick that sees GPU jobs maps none of them: the config is
                # wrong, and every later plan would be empty too
                log.error("tick %d: %s", n, "; ".join(exc.errors))
                return 2
            except Exception as exc:  # one bad tick must not end the loop
                from models import InputError

                if isinstance(exc, InputError):
                    log.error("tick %d: invalid snapshot: %s", n, "; ".join(exc.errors[:5]))
                elif isinstance(exc, SlurmError | StateFileError | PlanDirError):
                    log.error("tick %d: %s", n, exc)
                else:
                    log.exception("tick %d failed", n)
                status = 1
            else:
                log.info("tick %d: %s", n, result.summary())
                status = 0 if result.report.ok else 1
                # (a snapshot with a real job: squeue had GPU jobs, and some mapped)
                mapping_seen = mapping_seen or any(
                    not (j.get("_slurm") or {}).get("synthetic")
                    for j in result.snapshot.get("jobs", []))
            if ticks is not None and n >= ticks:
                break
            flag.event.wait(max(0.0, interval - (time.monotonic() - start)))
    finally:
        flag.restore()
    log.info("slurm: stopped after %d tick(s)", n)
    return status
