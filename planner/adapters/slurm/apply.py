"""Carry out a plan on Slurm.

Order of work (one call of :func:`apply_plan`):

1. Pin every placed job to its planned nodes (``scontrol update JobId=..
   ReqNodeList=..``) *before* any victim stops, so that when the GPUs free up
   Slurm starts the job there and nowhere else.
2. Re-check every victim (``squeue --jobs=..``: state and nodes) and signal
   all of them at once (``scancel --signal=TERM --batch|--full``); a victim that
   is no longer running (COMPLETING counts as ended), or that runs on other
   nodes than the snapshot (or its
   preemptors' planned nodes) says, is skipped and reported; victims without a
   checkpoint signal are requeued at once. When the re-check fails, no victim is
   signalled.
3. Poll the victims; each one is finished as soon as it has exited (COMPLETED or
   FAILED, as a job does that traps the signal, checkpoints and exits) or its own
   grace is over: ``scontrol requeuehold`` (kills it if still running), then
   ``scontrol update JobId=.. StartTime=now+N`` with N up to the plan's
   ``requeue_hold_until``, then ``scontrol release``. If setting the start time
   fails the job stays held (reported) rather than restarting at once. A
   victim that ends in another state (CANCELLED, TIMEOUT, NODE_FAIL, DEADLINE,
   BOOT_FAIL, OUT_OF_MEMORY, PREEMPTED, or requeued by someone else) ended for a
   reason of its own: it is left alone, named in the report's warnings. A
   signalled victim still running is always held back: ``requeuehold`` is
   retried, and an interrupted apply (an exception, a second SIGINT) still
   requeue-holds every victim it signalled and had not finished before it
   returns.

A plan older than the config's ``max_plan_age_s`` (default 2 x ``interval_s``),
from its ``now`` to this host's clock, is refused (``StalePlan``) unless
``force``; ``slurm run`` passes its own fresh plans with ``fresh=True``.

Every command is an argument list (never a shell string) built from ids checked
against strict patterns; each is logged, and a failure is reported without
stopping the others. With ``dry_run`` the commands are returned, not run.
"""

from __future__ import annotations

import logging
import math
import re
import shlex
import signal as _signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from models import InputError
from planner.adapters.slurm.config import SlurmConfig
from planner.adapters.slurm.hostlist import HostlistError, expand
from planner.adapters.slurm.parse import normalize_signal
from planner.adapters.slurm.scalars import iso, parse_time
from planner.adapters.slurm.state import AdapterState

log = logging.getLogger("planner.slurm")

JOB_ID = re.compile(r"^[1-9][0-9]{0,11}$")
NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_PLAN_JOB = re.compile(r"^(?P<id>[1-9][0-9]{0,11})(?:@(?P<node>[A-Za-z0-9][A-Za-z0-9._-]{0,127}))?$")

ACTIVE = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING",
          "SIGNALING", "STAGE_OUT"}
"""Job states in which a victim still holds (or is releasing) its GPUs."""

EXITED = {"COMPLETED", "FAILED"}
"""End states of a victim that exited after its signal, as a job does that traps it,
checkpoints and exits (with status 0 or not): it is requeued. A victim that ends
in another state (CANCELLED, TIMEOUT, NODE_FAIL, ...) is left alone."""

_ENDED_WHY = {
    "CANCELLED": "cancelled by its owner or an admin",
    "TIMEOUT": "it reached its time limit",
    "NODE_FAIL": "a node of it failed",
    "DEADLINE": "it reached its deadline",
    "BOOT_FAIL": "a node of it failed to boot",
    "OUT_OF_MEMORY": "it ran out of memory",
    "PREEMPTED": "preempted by Slurm itself: is Slurm's own preemption still on for it?",
}

REQUEUE_ATTEMPTS = 3
"""``scontrol requeuehold`` tries for a signalled victim before it is reported."""


class StalePlan(InputError):
    """A plan too old to carry out (or whose age cannot be told) without ``force``."""


class UnsafeId(ValueError):
    """An id that does not match the strict pattern; no command is built from it."""


def slurm_job_id(plan_job: str) -> str:
    """The Slurm job id behind a plan job id (``1234`` or the piece ``1234@gpu3``)."""
    m = _PLAN_JOB.match(str(plan_job))
    if not m:
        raise UnsafeId(f"job id {plan_job!r} is not a Slurm job id")
    return m.group("id")


def check_node(name: str) -> str:
    if not NODE.match(str(name)):
        raise UnsafeId(f"node name {name!r} is not a valid Slurm node name")
    return str(name)


# ------------------------------------------------------------ command builders

SLURM_SIGNAL_NAMES = frozenset({"HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1",
                                "USR2", "URG", "CONT", "STOP", "TSTP", "TTIN", "TTOU"})
"""The names ``scancel --signal`` knows (Slurm's ``sig_name2num``); another signal is
given by its number."""


def signal_cmd(cfg: SlurmConfig, job_id: str, signal: str) -> list[str]:
    name = normalize_signal(signal)
    if name is None:
        raise UnsafeId("no signal to send")
    short = name.removeprefix("SIG")
    arg = short if short in SLURM_SIGNAL_NAMES else str(int(_signal.Signals[name]))
    return [cfg.commands.scancel, f"--signal={arg}", f"--{cfg.signal_target}",
            _checked(job_id)]


def requeuehold_cmd(cfg: SlurmConfig, job_id: str) -> list[str]:
    return [cfg.commands.scontrol, "requeuehold", _checked(job_id)]


def start_time_cmd(cfg: SlurmConfig, job_id: str, seconds: int) -> list[str]:
    """Earliest start ``now+N`` seconds: relative, so clocks and time zones of this
    host and slurmctld need not agree."""
    if not isinstance(seconds, int) or seconds < 1:
        raise UnsafeId(f"start delay {seconds!r} must be a positive integer")
    return [cfg.commands.scontrol, "update", f"JobId={_checked(job_id)}",
            f"StartTime=now+{seconds}"]


def release_cmd(cfg: SlurmConfig, job_id: str) -> list[str]:
    return [cfg.commands.scontrol, "release", _checked(job_id)]


def pin_cmd(cfg: SlurmConfig, job_id: str, nodes: Sequence[str]) -> list[str]:
    if not nodes:
        raise UnsafeId("no nodes to pin to")
    return [cfg.commands.scontrol, "update", f"JobId={_checked(job_id)}",
            "ReqNodeList=" + ",".join(check_node(n) for n in nodes)]


def status_cmd(cfg: SlurmConfig, job_ids: Sequence[str]) -> list[str]:
    """State and nodes (``%N``, a hostlist) of each job, one ``id|STATE|nodes`` line."""
    return [cfg.commands.squeue, "--noheader", "--states=all", "--format=%A|%T|%N",
            "--jobs=" + ",".join(_checked(j) for j in job_ids)]


def _checked(job_id: str) -> str:
    if not JOB_ID.match(str(job_id)):
        raise UnsafeId(f"job id {job_id!r} is not a Slurm job id")
    return str(job_id)


# --------------------------------------------------------------------- running

@dataclass
class CommandResult:
    argv: list[str]
    purpose: str
    job: str
    rc: int | None = None  # None: not run (dry run)
    stdout: str = ""
    stderr: str = ""
    superseded: bool = False  # failed, but a retry of it succeeded

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def text(self) -> str:
        return shlex.join(self.argv)


Runner = Callable[[list[str], float], tuple[int, str, str]]


def subprocess_runner(argv: list[str], timeout: float) -> tuple[int, str, str]:
    """Run without a shell; (rc, stdout, stderr); 127 = not found, 124 = timed out."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return 126, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


@dataclass
class VictimOutcome:
    job: str
    signal: str | None
    grace_s: float
    signalled_at: str | None = None
    stopped_at: str | None = None
    stopped_in_grace: bool | None = None
    requeued: bool = False
    begin_delay_s: int | None = None
    released: bool = False
    skipped: str | None = None  # why it was not evicted after all
    ended: str | None = None  # the state it ended in on its own after the signal: left alone
    note: str = ""


@dataclass
class ApplyReport:
    dry_run: bool
    commands: list[CommandResult] = field(default_factory=list)
    victims: list[VictimOutcome] = field(default_factory=list)
    pinned: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[CommandResult]:
        return [c for c in self.commands if c.rc not in (0, None) and not c.superseded]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "ok": self.ok,
            "commands": [{"cmd": c.text, "purpose": c.purpose, "job": c.job, "rc": c.rc,
                          "stderr": c.stderr.strip()} | ({"retried": True} if c.superseded
                                                         else {})
                         for c in self.commands],
            "victims": [asdict(v) for v in self.victims],
            "pinned": self.pinned,
            "problems": self.problems,
            "warnings": self.warnings,
        }


class _Executor:
    def __init__(self, cfg: SlurmConfig, report: ApplyReport, runner: Runner,
                 echo: Callable[[str], None] | None) -> None:
        self.cfg, self.report, self.runner, self.echo = cfg, report, runner, echo

    def __call__(self, argv: list[str], purpose: str, job: str) -> CommandResult:
        res = CommandResult(argv, purpose, job)
        self.report.commands.append(res)
        if self.report.dry_run:
            if self.echo:
                self.echo(res.text)
            return res
        res.rc, res.stdout, res.stderr = self.runner(argv, self.cfg.command_timeout_s)
        if res.ok:
            log.info("slurm: %s", res.text)
        else:
            log.error("slurm: %s failed (rc %s): %s", res.text, res.rc, res.stderr.strip())
        return res


def query_jobs(cfg: SlurmConfig, job_ids: Sequence[str], runner: Runner
               ) -> dict[str, tuple[str, list[str] | None]] | None:
    """Current ``(state, nodes)`` of each job: ``GONE`` when Slurm no longer knows
    it; nodes None when squeue did not say (a pending job has ``[]``). None when
    squeue failed."""
    if not job_ids:
        return {}
    argv = status_cmd(cfg, job_ids)
    log.debug("slurm: %s", shlex.join(argv))
    rc, out, err = runner(argv, cfg.command_timeout_s)
    found: dict[str, tuple[str, list[str] | None]] = {}
    for line in out.splitlines():
        jid, _, rest = line.strip().partition("|")
        if jid not in job_ids:
            continue
        st, sep, where = rest.partition("|")
        state = st.strip().split()[0].upper() if st.strip() else "UNKNOWN"
        nodes: list[str] | None = None
        if sep:
            where = where.strip()
            try:
                nodes = [] if where in ("", "(null)") or where.startswith("(") \
                    else expand(where)
            except HostlistError:
                nodes = None
        found[jid] = (state, nodes)
    if rc != 0 and not found:
        if "Invalid job id" in err:
            return {j: ("GONE", []) for j in job_ids}
        log.warning("slurm: cannot read job states: %s", err.strip())
        return None
    return {j: found.get(j, ("GONE", [])) for j in job_ids}


def query_states(cfg: SlurmConfig, job_ids: Sequence[str], runner: Runner
                 ) -> dict[str, str] | None:
    """Current state of each job (``GONE`` when Slurm no longer knows it); None on error."""
    jobs = query_jobs(cfg, job_ids, runner)
    return None if jobs is None else {j: st for j, (st, _) in jobs.items()}


def plan_age_problem(data: Mapping[str, Any], cfg: SlurmConfig, now: float) -> str | None:
    """Why a plan is too old (or too far in the future) to carry out; None if fresh."""
    limit = cfg.plan_age_limit_s()
    made = parse_time(data.get("now"))
    if made is None:
        return "the plan has no `now`, so its age cannot be told"
    age = now - made
    if age > limit:
        return (f"the plan is {age:.0f} s old (made for {iso(made)}, now {iso(now)}), older "
                f"than max_plan_age_s {limit:g} s: the cluster has moved on since; make a "
                "new plan (or give --force)")
    if age < -limit:
        return (f"the plan's now {iso(made)} is {-age:.0f} s ahead of this host's clock "
                f"({iso(now)}), more than max_plan_age_s {limit:g} s: are the clocks "
                "of the planning host and this one apart? (or give --force)")
    return None


# ----------------------------------------------------------------------- apply

@dataclass
class _Victim:
    job: str
    signal: str | None
    grace_s: float
    hold_until: float | None
    outcome: VictimOutcome
    deadline: float = 0.0
    done: bool = False
    evicted_at: float | None = None  # when it was signalled (or, without one, requeued)
    gpus: int | None = None
    planned_nodes: set[str] = field(default_factory=set)  # preemptors' nodes, pieces' nodes


def _slurm_ids(plan_jobs: Sequence[str]) -> set[str]:
    out = set()
    for j in plan_jobs:
        try:
            out.add(slurm_job_id(j))
        except UnsafeId:
            pass
    return out


def _plan_dict(plan: Any) -> dict[str, Any]:
    if hasattr(plan, "model_dump"):
        return plan.model_dump(mode="json")
    if not isinstance(plan, Mapping):
        raise TypeError("plan must be a mapping or a pydantic Plan")
    return dict(plan)


def apply_plan(plan: Any, cfg: SlurmConfig, *, dry_run: bool = False,
               state: AdapterState | None = None, runner: Runner = subprocess_runner,
               clock: Callable[[], float] = time.time,
               sleep: Callable[[float], None] = time.sleep,
               echo: Callable[[str], None] | None = None,
               gpus: dict[str, int] | None = None,
               expected_nodes: Mapping[str, Iterable[str]] | None = None,
               force: bool = False, fresh: bool = False) -> ApplyReport:
    """Carry out `plan` (contract section 6); see the module docstring.

    `state` records pins, preemption times and evictions (with the victims' GPUs
    from `gpus`, Slurm job id -> GPUs, when given) for the next snapshot. `runner`,
    `clock` and `sleep` are injectable for tests. With `dry_run`, nothing is run
    and each command is passed to `echo` (and listed in the report).

    `expected_nodes` (Slurm job id -> nodes, from the snapshot the plan was made
    from) makes the re-check of each victim exact; without it a victim must still
    run on at least one node of its preemptors' planned placement. A plan older
    than ``cfg.plan_age_limit_s()`` raises :class:`StalePlan` unless `force` (then
    it is a warning of the report); `fresh` (a plan ``slurm run`` just made) skips
    the age check.

    The report's ``warnings`` are not logged here: the caller prints each one once
    (``slurm apply`` on stderr, ``slurm run`` in its log).
    """
    data = _plan_dict(plan)
    report = ApplyReport(dry_run=dry_run)
    if not fresh:
        stale = plan_age_problem(data, cfg, clock())
        if stale and not force:
            raise StalePlan([stale], "plan")
        if stale:  # (printed by the caller with the report's other warnings)
            report.warnings.append(f"{stale}; applied anyway (--force)")
    run = _Executor(cfg, report, runner, echo)
    state = state if state is not None else AdapterState()

    # 1. pins
    if dry_run and echo and data.get("placements"):
        echo("# pin the placed jobs to their planned nodes")
    planned: dict[str, set[str]] = {}  # Slurm job id of a placed job -> its planned nodes
    for placement in data.get("placements") or []:
        try:
            jid = slurm_job_id(placement["job"])
            nodes = [check_node(p["node"]) for p in placement.get("placement") or []]
            argv = pin_cmd(cfg, jid, nodes)
        except (UnsafeId, KeyError, TypeError) as exc:
            report.problems.append(f"placement {placement.get('job')!r}: {exc}; skipped")
            log.error("slurm: placement %r skipped: %s", placement.get("job"), exc)
            continue
        planned.setdefault(jid, set()).update(nodes)
        if run(argv, "pin", jid).ok or dry_run:
            report.pinned[jid] = nodes
            if not dry_run:
                state.pinned[jid] = nodes

    # victims, merged per Slurm job (pieces of one job are evicted together)
    victims: dict[str, _Victim] = {}
    for ev in data.get("evictions") or []:
        try:
            jid = slurm_job_id(ev["job"])
            sig = normalize_signal(ev.get("signal"))
            grace = float(ev.get("grace_s") or 0)
        except (UnsafeId, ValueError, KeyError, TypeError) as exc:
            report.problems.append(f"eviction {ev.get('job')!r}: {exc}; skipped")
            log.error("slurm: eviction %r skipped: %s", ev.get("job"), exc)
            continue
        until = parse_time(ev.get("requeue_hold_until"))
        beneficiaries = _slurm_ids(ev.get("preemptors") or [])
        if beneficiaries and not beneficiaries & set(report.pinned):
            # no eviction without a beneficiary: its preemptors could not be pinned
            # (started elsewhere, cancelled, or refused), so evicting it gains nothing
            msg = (f"eviction {ev.get('job')!r}: none of its preemptors "
                   f"{sorted(beneficiaries)} could be pinned; not evicted")
            report.problems.append(msg)
            log.error("slurm: %s", msg)
            continue
        where = {n for b in beneficiaries for n in planned.get(b, ())}
        piece = str(ev["job"]).partition("@")[2]
        if piece:
            where.add(piece)
        if jid in victims:
            v = victims[jid]
            v.grace_s = max(v.grace_s, grace)
            v.outcome.grace_s = v.grace_s
            if until is not None:
                v.hold_until = max(v.hold_until or until, until)
            v.planned_nodes |= where
            continue
        victims[jid] = _Victim(jid, sig, grace, until, VictimOutcome(jid, sig, grace),
                               gpus=(gpus or {}).get(jid), planned_nodes=where)
    report.victims = [v.outcome for v in victims.values()]
    if not victims:
        return report

    if dry_run:
        if echo:
            echo("# signal every victim at once (each re-checked first: skipped if it "
                 "ended or moved)")
        for v in victims.values():
            if v.signal:
                run(signal_cmd(cfg, v.job, v.signal), "signal", v.job)
        for v in victims.values():
            if echo:
                echo(f"# job {v.job}: once it has stopped, at the latest after "
                     f"{v.grace_s:g} s" if v.signal else f"# job {v.job}: no signal, at once")
            _finish(v, cfg, run, state, clock, sleep, report, stopped_at=None)
        return report

    # 2. re-check every victim just before acting, then signal them all at once
    current = query_jobs(cfg, list(victims), runner)
    if current is None:
        msg = ("cannot re-check the victims' state (squeue failed): no victim signalled "
               "this time")
        report.problems.append(msg)
        log.error("slurm: %s", msg)
        for v in victims.values():
            v.done = True
            v.outcome.skipped = v.outcome.note = "not re-checked (squeue failed)"
        return report
    for v in victims.values():
        st, nodes_now = current.get(v.job, ("GONE", []))
        why = _skip_reason(v, st, nodes_now, expected_nodes)
        if why:
            v.done = True
            v.outcome.skipped = why
            v.outcome.note = f"{why}; left alone"
            report.warnings.append(f"victim {v.job}: {why}; not evicted")
            continue
        if nodes_now is None:
            report.warnings.append(f"victim {v.job}: squeue did not say where it runs; "
                                   "evicted as planned")
    try:
        for v in victims.values():
            if v.done:
                continue
            now = clock()
            v.deadline = now + v.grace_s
            v.evicted_at = now
            if v.signal is None:
                v.outcome.note = "no checkpoint signal: requeued at once"
                v.deadline = now
                continue
            res = run(signal_cmd(cfg, v.job, v.signal), "signal", v.job)
            v.outcome.signalled_at = iso(now)
            if not res.ok:
                v.outcome.note = "signal failed; requeued at the end of the grace"

        # 3. poll; finish each victim when it stopped or its grace is over
        while True:
            waiting = [v for v in victims.values() if not v.done]
            if not waiting:
                break
            now = clock()
            polled = query_states(cfg, [v.job for v in waiting], runner)
            for v in waiting:
                now_state = polled.get(v.job) if polled is not None else None
                stopped = now_state is not None and now_state not in ACTIVE
                # (one not signalled that exited ended on its own too: no requeue)
                if stopped and now_state != "GONE" and (
                        now_state not in EXITED or v.outcome.signalled_at is None):
                    _ended_on_its_own(v, str(now_state), now, state, report)
                    continue
                if stopped or now >= v.deadline:
                    v.outcome.stopped_in_grace = stopped and v.signal is not None
                    if not stopped and v.signal is not None:
                        report.warnings.append(
                            f"victim {v.job} did not exit within its grace of {v.grace_s:g} s "
                            f"after {v.signal}: requeuehold stops it (does the job trap the "
                            "signal and checkpoint in time?)")
                    _finish(v, cfg, run, state, clock, sleep, report,
                            stopped_at=now if stopped else None)
            if all(v.done for v in victims.values()):
                break
            next_deadline = min(v.deadline for v in victims.values() if not v.done)
            sleep(max(0.05, min(cfg.poll_interval_s, next_deadline - clock())))
    finally:
        # never leave a signalled victim running free: an interrupted apply (an
        # exception, a second SIGINT) still holds back everything it signalled
        for v in victims.values():
            if not v.done and v.evicted_at is not None:
                v.outcome.note = (v.outcome.note + "; " if v.outcome.note else "") + \
                    "apply interrupted: requeued before its grace was over"
                _finish(v, cfg, run, state, clock, None, report, stopped_at=None)
    return report


def _ended_on_its_own(v: _Victim, st: str, now: float, state: AdapterState,
                      report: ApplyReport) -> None:
    """A victim that ended after its signal in a state other than COMPLETED or FAILED
    (cancelled, timed out, its node failed, requeued by someone else, ...): Slurm or
    a person ended it for a reason of their own, so it is left alone (no requeue).
    A signalled one still counts as an eviction of the budget (R15)."""
    v.done = True
    why = _ENDED_WHY.get(st, "it ended on its own" if st in EXITED else
                         "it was requeued or ended by someone else")
    v.outcome.ended = st
    v.outcome.stopped_at = iso(now)
    v.outcome.stopped_in_grace = v.signal is not None
    after = "after its signal" if v.outcome.signalled_at else "before it was requeued"
    note = f"ended {st} {after} ({why}): not requeued, left alone"
    v.outcome.note = (v.outcome.note + "; " if v.outcome.note else "") + note
    report.warnings.append(f"victim {v.job}: {note}")
    log.info("slurm: victim %s: %s", v.job, note)
    if v.outcome.signalled_at is not None and v.evicted_at is not None:
        state.record_eviction(v.job, iso(v.evicted_at), v.gpus)


def _skip_reason(v: _Victim, st: str, nodes_now: list[str] | None,
                 expected_nodes: Mapping[str, Iterable[str]] | None) -> str | None:
    """Why a victim must not be evicted after all (it ended, is ending, or it
    moved); None. COMPLETING counts as ended: the job is already on its way out."""
    if st not in ACTIVE or st == "COMPLETING":
        return f"was {st or 'unknown'} before the signal (ended or requeued on its own)"
    if nodes_now is None:
        return None
    now_set = set(nodes_now)
    expected = set((expected_nodes or {}).get(v.job, ()))
    if expected and now_set != expected:
        return (f"now runs on {','.join(sorted(now_set)) or 'no node'}, not on "
                f"{','.join(sorted(expected))} as in the snapshot (it moved)")
    if v.planned_nodes and not now_set & v.planned_nodes:
        return (f"now runs on {','.join(sorted(now_set)) or 'no node'}, none of the nodes "
                f"the plan frees for its preemptors ({','.join(sorted(v.planned_nodes))}): "
                "it moved")
    return None


def _finish(v: _Victim, cfg: SlurmConfig, run: _Executor, state: AdapterState,
            clock: Callable[[], float], sleep: Callable[[float], None] | None,
            report: ApplyReport, stopped_at: float | None) -> None:
    """requeuehold (retried), StartTime=now+N, release; record the preemption."""
    v.done = True
    tries: list[CommandResult] = []
    for attempt in range(1, REQUEUE_ATTEMPTS + 1):
        res = run(requeuehold_cmd(cfg, v.job), "requeuehold", v.job)
        tries.append(res)
        if res.ok or res.rc is None or "Invalid job id" in res.stderr:
            break
        if attempt < REQUEUE_ATTEMPTS and sleep is not None:
            sleep(min(cfg.poll_interval_s, 1.0))
    if res.ok:
        for earlier in tries[:-1]:
            earlier.superseded = True
    if not (res.ok or res.rc is None):
        gone = "Invalid job id" in res.stderr
        msg = (f"victim {v.job} was signalled but Slurm no longer knows it, so it cannot be "
               "requeued (MinJobAge too short?)" if gone else
               f"victim {v.job} was signalled but requeuehold failed {REQUEUE_ATTEMPTS} "
               f"times: it is not held back; hold it by hand: scontrol requeuehold {v.job}")
        v.outcome.note = (v.outcome.note + "; " if v.outcome.note else "") + \
            ("requeuehold failed: Slurm no longer knows the job" if gone else
             "requeuehold failed")
        report.problems.append(msg)
        log.error("slurm: %s", msg)
        return
    v.outcome.requeued = True
    now = clock()
    stop = stopped_at if stopped_at is not None else now
    v.outcome.stopped_at = iso(stop)
    if res.rc is not None:
        old = state.preempted.get(v.job, {})
        state.preempted[v.job] = {"at": iso(stop), "count": int(old.get("count", 0)) + 1}
        # the eviction, for the rolling budget (R15) of the next ticks
        state.record_eviction(v.job, iso(v.evicted_at if v.evicted_at is not None else stop),
                              v.gpus)
    if v.hold_until is None:
        v.outcome.note = "the plan gives no requeue_hold_until: left held, release it by hand"
        report.problems.append(f"victim {v.job}: {v.outcome.note}")
        return
    delay = math.ceil(v.hold_until - now)
    if delay >= 1:
        v.outcome.begin_delay_s = delay
        res = run(start_time_cmd(cfg, v.job, delay), "start-time", v.job)
        if not (res.ok or res.rc is None):
            v.outcome.note = "StartTime update failed: left held, release it by hand"
            return
    res = run(release_cmd(cfg, v.job), "release", v.job)
    v.outcome.released = res.ok or res.rc is None
