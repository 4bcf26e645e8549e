"""Workload traces for the simulator: the Philly CSV, the Alibaba ``openb`` pod list
and a native JSONL format with every field explicit.

A real trace lacks most of what the planner needs (tier, checkpoint size, interval,
restore time, signal trap, multi-node shape). Those are synthesized by the rules
below, all seeded and order-independent (each job draws from its own generator,
seeded by ``(seed, job id)``), so the same trace and seed always give the same
jobs. ``docs/simulation.md`` states every rule and its source.

Rules (shared by the Philly and openb loaders):

- shape: up to ``node_gpus`` GPUs -> one node; more -> ``ceil(gpus / node_gpus)``
  nodes of ``node_gpus`` GPUs each (the trace's 16..128-GPU jobs are 8-GPU gangs).
- checkpoint size: ``gpus * U(2, 10)`` GB (weights plus optimizer state grow with
  the model, and the model grows with the GPUs it is trained on).
- checkpoint interval: one of 15, 30 or 60 min (1 : 2 : 1).
- restore time: ``60 + size_gb / 2`` s (process start and data-loader warm-up,
  then reading the checkpoint back at 2 GB/s per job).
- signal trap: 80% of jobs trap ``SIGTERM``; 20% cannot checkpoint on demand.
- barrier 10 s, cleanup 5 s.
- time limit (what the scheduler enforces, Slurm's ``--time``): ``(duration +
  restore) x f`` rounded up to a quarter hour, ``f = 4 ** u`` (1x to 4x, median
  2x: users ask for more time than they need); a running job's
  ``expected_end_at`` is the start of its current run plus this limit, so it is
  never before its real end.
- Philly tier: by team (the ``cluster`` column): ``1 + floor(3 u)``, ``u`` a hash
  of (seed, team), so a team keeps its tier in every slice of the trace.
- openb tier: by ``qos``: Guaranteed -> 1, LS -> 1 (30%) or 2 (70%),
  Burstable -> 2, BE -> 3.
- Either can be replaced by another tier rule (:class:`TierRule`): by GPU count,
  by duration class, or a team -> tier mapping file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from models import InputError
from models.load import decode_text
from models.snapshot import LATEST

__all__ = [
    "TierRule",
    "TraceJob",
    "detect_format",
    "job_rng",
    "load_jsonl",
    "load_openb",
    "load_philly",
    "load_trace",
    "parse_tier_rule",
    "resolve_trace_path",
    "shared_traces_dir",
    "slice_trace",
    "write_jsonl",
]

SIGNAL_SHARE = 0.8
INTERVALS_S = (900, 1800, 1800, 3600)
CKPT_GB_PER_GPU = (2.0, 10.0)
RESTORE_BASE_S = 60.0
RESTORE_READ_GB_PER_S = 2.0
BARRIER_S = 10.0
CLEANUP_S = 5.0
OPENB_EPOCH = "2023-07-01T00:00:00Z"
LIMIT_FACTOR_MAX = 4.0  # time limit = run time x 4 ** u, u uniform in [0, 1)
LIMIT_ROUND_S = 900.0  # ... rounded up to a quarter hour


@dataclass
class TraceJob:
    """One job of a trace, every field explicit (the native JSONL record).

    ``submit`` is Unix epoch seconds; ``duration_s`` is the useful run time the
    job needs (it completes when its progress reaches it)."""

    id: str
    submit: float
    duration_s: float
    gpus_per_node: int
    nodes: int = 1
    tier: int = 3
    priority: int = 0
    team: str | None = None
    gpu_type: str | None = None
    topology: str = "nvlink"
    checkpoint_gb: float = 0.0
    checkpoint_interval_s: float = 1800.0
    restore_s: float = 0.0
    signal: str | None = "SIGTERM"
    barrier_s: float = 0.0
    cleanup_s: float = 0.0
    time_limit_s: float | None = None  # enforced limit of one run (None: none known)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if not d["extra"]:
            d.pop("extra")
        return d


_FIELDS = {f.name for f in fields(TraceJob)}
_REQUIRED = ("id", "submit", "duration_s", "gpus_per_node")


# ------------------------------------------------------------------ paths


def shared_traces_dir() -> Path:
    """``../shared/traces`` next to the checkout (``/work/shared/traces`` here)."""
    repo = Path(__file__).resolve().parents[2]
    return repo.parent / "shared" / "traces"


def resolve_trace_path(name: str | Path) -> Path:
    """A trace path as given, else looked up in the shared traces folder."""
    p = Path(name)
    if p.exists():
        return p
    alt = shared_traces_dir() / p.name
    if alt.exists():
        return alt
    raise InputError([f"trace: file {str(name)!r} not found (also looked in {alt.parent})"])


# ------------------------------------------------------------------ synthesis


def job_uniforms(seed: int, key: str, n: int = 4) -> list[float]:
    """``n`` (<= 4) uniform numbers in [0, 1) private to one job: a hash of
    ``(seed, key)``, so independent of trace order and slicing (and fast)."""
    h = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=32).digest()
    return [int.from_bytes(h[8 * i:8 * i + 8], "big") / 2.0 ** 64 for i in range(n)]


def job_rng(seed: int, key: str) -> random.Random:
    """A generator private to one job (for rules needing more draws)."""
    h = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(h, "big"))


def _shape(gpus: int, node_gpus: int) -> tuple[int, int]:
    if gpus <= node_gpus:
        return gpus, 1
    return node_gpus, math.ceil(gpus / node_gpus)


def _synthesize(job_id: str, gpus: int, seed: int, node_gpus: int,
                duration_s: float) -> dict[str, Any]:
    """Checkpoint, restore, signal, time limit and shape for a job that the trace
    does not describe."""
    u = job_uniforms(seed, job_id, 4)
    gpn, nodes = _shape(gpus, node_gpus)
    lo, hi = CKPT_GB_PER_GPU
    size = round(gpn * nodes * (lo + (hi - lo) * u[0]), 2)
    interval = float(INTERVALS_S[int(u[1] * len(INTERVALS_S))])
    signal = "SIGTERM" if u[2] < SIGNAL_SHARE else None
    restore = round(RESTORE_BASE_S + size / RESTORE_READ_GB_PER_S, 1)
    return {
        "gpus_per_node": gpn, "nodes": nodes, "checkpoint_gb": size,
        "checkpoint_interval_s": interval, "restore_s": restore,
        "signal": signal, "barrier_s": BARRIER_S, "cleanup_s": CLEANUP_S,
        "time_limit_s": time_limit(duration_s + restore, u[3]),
    }


def time_limit(run_s: float, u: float) -> float:
    """A synthesized time limit: ``run_s x LIMIT_FACTOR_MAX ** u`` rounded up to
    LIMIT_ROUND_S (at least the run time: the limit is never before the real end)."""
    return math.ceil(run_s * LIMIT_FACTOR_MAX ** u / LIMIT_ROUND_S - 1e-9) * LIMIT_ROUND_S


@dataclass(frozen=True)
class TierRule:
    """How trace jobs get their tier (``--tier-rule``):

    - ``team``: by team, ``1 + floor(3 u)`` with ``u`` a hash of (seed, team) (Philly's
      default; for openb the team is the ``qos``, its default is :func:`_openb_tier`);
    - ``gpus[:A,B]``: at least A GPUs -> tier 1, at least B -> tier 2, else tier 3
      (default ``gpus:16,2``: multi-node training first);
    - ``duration[:A,B]``: run time under A s -> tier 1, under B s -> tier 2, else 3
      (default ``duration:3600,86400``: short work first, long batch preemptible);
    - ``map:FILE``: a JSON or YAML file ``{"teams": {team: tier}, "default": tier}``
      (or a plain ``{team: tier}`` map; default tier 3).
    """

    kind: str = "team"
    thresholds: tuple[float, ...] = ()
    teams: tuple[tuple[str, int], ...] = ()
    default: int = 3

    def tier(self, team: str | None, gpus: int, duration_s: float, seed: int) -> int:
        if self.kind == "team":
            return team_tier(team or "-", seed)
        if self.kind == "gpus":
            a, b = self.thresholds
            return 1 if gpus >= a else 2 if gpus >= b else 3
        if self.kind == "duration":
            a, b = self.thresholds
            return 1 if duration_s < a else 2 if duration_s < b else 3
        return dict(self.teams).get(team or "", self.default)

    def describe(self) -> str:
        if self.kind in ("gpus", "duration"):
            return f"{self.kind}:{','.join(f'{x:g}' for x in self.thresholds)}"
        if self.kind == "map":
            return f"map ({len(self.teams)} teams, default tier {self.default})"
        return self.kind


_RULE_DEFAULTS = {"gpus": (16.0, 2.0), "duration": (3600.0, 86400.0)}


def parse_tier_rule(text: str | None) -> TierRule | None:
    """A :class:`TierRule` from its ``--tier-rule`` text (None: the format's default);
    InputError naming the option for anything else."""
    if text is None or text == "":
        return None
    kind, _, arg = text.partition(":")
    bad = f"--tier-rule {text!r}"
    if kind == "team" and not arg:
        return TierRule("team")
    if kind in _RULE_DEFAULTS:
        if not arg:
            return TierRule(kind, _RULE_DEFAULTS[kind])
        try:
            th = tuple(float(x) for x in arg.split(","))
        except ValueError:
            th = ()
        if len(th) != 2 or not all(math.isfinite(x) and x >= 0 for x in th):
            raise InputError([f"{bad}: expected {kind}:A,B with two numbers >= 0"])
        if kind == "gpus" and th[0] < th[1] or kind == "duration" and th[0] > th[1]:
            order = "A >= B" if kind == "gpus" else "A <= B"
            raise InputError([f"{bad}: expected {order} (tier 1 first)"])
        return TierRule(kind, th)
    if kind == "map" and arg:
        from models import read_document

        doc = read_document(arg)
        if isinstance(doc, dict) and "teams" in doc:
            teams, default = doc.get("teams"), doc.get("default", 3)
        else:
            teams, default = doc, 3
        if not isinstance(teams, dict) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in [*teams.values(), default]):
            raise InputError([(f"{bad}: the file must map team names to integer tiers "
                               '({"teams": {"team-a": 1}, "default": 3})')], arg)
        return TierRule("map", (), tuple(sorted((str(k), int(v)) for k, v in teams.items())),
                        int(default))
    raise InputError([f"{bad}: expected team, gpus[:A,B], duration[:A,B] or map:FILE"])


def team_tier(team: str, seed: int) -> int:
    """Tier by team: ``1 + floor(3 u)`` with ``u`` a hash of ``(seed, team)`` (stable
    whatever slice of the trace is loaded)."""
    return 1 + min(2, int(3 * job_uniforms(seed, "team:" + team, 1)[0]))


# ------------------------------------------------------------------ loaders

_YEAR_9000 = LATEST.timestamp()  # (the contract's times: from 1970, before 9000)
MAX_TIER = 10**6  # tier numbers: 1 (the most important) to this (traces, the generator)
MAX_TRACE_GPUS = 100_000  # GPUs of one job of a CSV trace (a Philly job has at most 128)


def _epoch(text: str) -> float:
    """Epoch seconds of a number or an ISO-8601 time (UTC when it names no zone); NaN
    when the text is neither (so that a range rule refuses it)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text)
        return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    except (ValueError, OverflowError):
        return math.nan


def parse_epoch(text: str | float | None, what: str) -> float | None:
    if text is None or text == "":
        return None
    t = float(text) if isinstance(text, (int, float)) else _epoch(str(text))
    if not math.isfinite(t):  # (nan, inf: no time; 'nan' read as a number was one)
        raise InputError([f"{what}: {text!r} is neither epoch seconds nor an ISO-8601 time"])
    return t


def _number(v: Any) -> bool:
    # (an int is finite however long: math.isfinite overflows on 400 digits)
    return (isinstance(v, int) and not isinstance(v, bool)) or (
        isinstance(v, float) and math.isfinite(v))


def _whole(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: type(v) is int and lo <= v <= hi


def _to_1e9(v: Any) -> bool:  # (seconds, GB)
    return _number(v) and 0 <= v <= 1e9


def in_contract_time(v: Any) -> bool:
    return _number(v) and 0 <= v < _YEAR_9000


def _text(v: Any) -> bool:
    return isinstance(v, str) and bool(v)


Rule = tuple[str, Callable[[Any], bool]]  # (what a value must be, the check)


def _shown(v: Any) -> str:
    try:
        return json.dumps(v, default=str)[:40]
    except ValueError:  # (an integer of thousands of digits)
        return type(v).__name__


def field_problems(values: dict[str, Any], rules: dict[str, Rule],
                   shown: dict[str, Any] | None = None) -> list[str]:
    """One ``field: must be WHAT, got VALUE`` message per value of ``values`` that breaks
    its rule (fields without a value are not checked); ``shown`` gives the values as
    the file spells them (a CSV row's text) when ``values`` holds them converted. The
    one check of the trace records (JSONL, Philly, openb) and of the cluster
    generator's spec."""
    shown = values if shown is None else shown
    return [f"{k}: must be {what}, got {_shown(shown[k])}"
            for k, (what, ok) in rules.items() if k in values and not ok(values[k])]


def _csv_number(text: str) -> float | int | None:
    """A CSV cell as a number (an int when it is a whole one, ``8.0`` too); None
    when it is not a number."""
    try:
        x = float(text)
    except ValueError:
        return None
    return int(x) if math.isfinite(x) and x.is_integer() else x


def read_trace_text(path: Path) -> str:
    """A trace file's text; InputError naming the file for a folder, a file that cannot
    be read, a binary file or text that is not UTF-8."""
    if path.is_dir():
        raise InputError(["trace: this is a folder; give a trace file"], str(path))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError([f"trace: cannot read the file: {exc.strerror or exc}"], str(path)) \
            from None
    if b"\x00" in data[:4096] and not data.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00")):
        raise InputError([("trace: this is a binary file; give a Philly or openb CSV, or a "
                          "JSONL file (UTF-8 text)")], str(path))
    return decode_text(data, str(path))  # (UTF-16 and 8-bit encodings: save it as UTF-8)


def _csv_rows(path: Path, fmt: str, need: set[str],
              errors: list[str]) -> list[tuple[int, dict[str, str]]]:
    """The rows of a CSV trace as (line number, {column: text}); the header must hold
    the ``need`` columns (InputError), a row as many values as the header has columns
    (else a problem in ``errors``). Blank lines are skipped."""
    reader = csv.reader(io.StringIO(read_trace_text(path), newline=""))
    rows = []
    try:
        header = next(reader, [])
        missing = sorted(need - set(header))
        if header and missing:
            raise InputError([f"{fmt} trace: columns {missing} missing"], str(path))
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                errors.append(f"row {reader.line_num}: {len(row)} value(s) for the "
                              f"{len(header)} columns of the header")
                continue
            rows.append((reader.line_num, dict(zip(header, row, strict=True))))
    except csv.Error as exc:
        raise InputError([f"row {reader.line_num}: malformed CSV: {exc}"], str(path)) from None
    return rows


_GPUS = f"a whole number from 0 to {MAX_TRACE_GPUS:,}"
_TIME = ("a time (ISO-8601 such as 2017-10-04 09:01:55, UTC unless it names a zone) from "
         "1970 to 9000")
_PHILLY_RULES: dict[str, Rule] = {
    "timestamp": (_TIME, in_contract_time),
    "duration": ("a number of seconds from 0 to 10^9", _to_1e9),
    "num_gpus": (_GPUS, _whole(0, MAX_TRACE_GPUS)),
    "cluster": ("a team name (not empty)", _text),
}


def load_philly(path: str | Path, *, seed: int = 0, node_gpus: int = 8,
                tier_rule: TierRule | None = None) -> list[TraceJob]:
    """The Philly CSV (``timestamp,duration,num_gpus,gpu_time,cluster``), times in UTC.
    Rows of jobs that never ran (0 GPUs or 0 s) are skipped; a value of the wrong type
    or range is bad input naming its row and column."""
    path = resolve_trace_path(path)
    errors: list[str] = []
    jobs = []
    for i, (line, r) in enumerate(_csv_rows(path, "philly", set(_PHILLY_RULES), errors)):
        v: dict[str, Any] = {
            "timestamp": _epoch(r["timestamp"]), "duration": _csv_number(r["duration"]),
            "num_gpus": _csv_number(r["num_gpus"]), "cluster": r["cluster"]}
        bad = field_problems(v, _PHILLY_RULES, r)
        if bad:
            errors += [f"row {line}: {b}" for b in bad]
            continue
        duration, gpus = float(v["duration"]), int(v["num_gpus"])
        if gpus == 0 or duration == 0:
            continue
        jid = f"philly-{i:05d}"
        tier = (tier_rule or TierRule()).tier(r["cluster"], gpus, duration, seed)
        jobs.append(TraceJob(id=jid, submit=v["timestamp"], duration_s=duration, tier=tier,
                             team=r["cluster"],
                             **_synthesize(jid, gpus, seed, node_gpus, duration)))
    if errors:
        raise InputError(errors, str(path))
    jobs.sort(key=lambda j: (j.submit, j.id))
    return jobs


def _openb_tier(qos: str, u: float) -> int:
    if qos == "Guaranteed":
        return 1
    if qos == "LS":
        return 1 if u < 0.3 else 2
    if qos == "Burstable":
        return 2
    return 3


_WHEN = "empty or a time (seconds from 0, or ISO-8601) before 9000"
_OPENB_RULES: dict[str, Rule] = {
    "name": ("a pod name (not empty)", _text),
    "num_gpu": (f"empty or {_GPUS}", _whole(0, MAX_TRACE_GPUS)),
    "creation_time": ("a number of seconds from 0 to 10^9", _to_1e9),
    "scheduled_time": (_WHEN, lambda v: v is None or in_contract_time(v)),
    "deletion_time": (_WHEN, lambda v: v is None or in_contract_time(v)),
}


def load_openb(path: str | Path, *, seed: int = 0, node_gpus: int = 8,
               epoch: str = OPENB_EPOCH, time_scale: float = 1.0,
               tier_rule: TierRule | None = None) -> list[TraceJob]:
    """Alibaba openb pods. Pods without GPUs, never scheduled, never deleted or deleted
    when scheduled are dropped; a fractional GPU (``gpu_milli`` < 1000) counts as a
    whole one; the run time is ``deletion - scheduled``. ``time_scale`` < 1 compresses
    the arrival times. A value of the wrong type or range is bad input naming its row
    and column."""
    path = resolve_trace_path(path)
    base = parse_epoch(epoch, "epoch") or 0.0
    errors: list[str] = []
    jobs = []
    first: dict[str, int] = {}  # the row of each pod name
    for line, r in _csv_rows(path, "openb", set(_OPENB_RULES), errors):
        if r["name"] in first:
            errors.append(f"row {line}: name: pod {r['name']!r} is already on row "
                          f"{first[r['name']]} (a pod name is its job's id)")
            continue
        first[r["name"]] = line
        v: dict[str, Any] = {
            "name": r["name"], "num_gpu": _csv_number(r["num_gpu"] or "0"),
            "creation_time": _csv_number(r["creation_time"]),
            **{k: _epoch(r[k]) if r[k] else None for k in ("scheduled_time", "deletion_time")}}
        bad = field_problems(v, _OPENB_RULES, r)
        sched, dele = v["scheduled_time"], v["deletion_time"]
        if not bad and sched is not None and dele is not None and not 0 <= dele - sched <= 1e9:
            bad = [(f"deletion_time: must be from 0 to 10^9 s after scheduled_time ({sched:g}), "
                    f"got {_shown(r['deletion_time'])}")]
        if bad:
            errors += [f"row {line}: {b}" for b in bad]
            continue
        gpus = int(v["num_gpu"])
        if gpus == 0 or sched is None or dele is None or dele == sched:
            continue
        jid = r["name"]
        u = job_uniforms(seed, jid + "/tier", 1)[0]
        qos = r.get("qos", "BE")
        tier = (_openb_tier(qos, u) if tier_rule is None
                else tier_rule.tier(qos, gpus, dele - sched, seed))
        jobs.append(TraceJob(id=jid, submit=base + v["creation_time"] * time_scale,
                             duration_s=dele - sched, tier=tier, team=r.get("qos"),
                             **_synthesize(jid, gpus, seed, node_gpus, dele - sched)))
    if errors:
        raise InputError(errors, str(path))
    jobs.sort(key=lambda j: (j.submit, j.id))
    return jobs


# a JSONL record's fields beyond their presence: (what they must be, the check)
_ROW_RULES: dict[str, Rule] = {
    "id": ("a non-empty string", _text),
    "submit": ("epoch seconds or an ISO-8601 time",
               lambda v: (_number(v) and abs(v) < 1e18) or _text(v)),
    "duration_s": ("a number of seconds from above 0 to 10^9", lambda v: _to_1e9(v) and v > 0),
    "gpus_per_node": ("a whole number from 1 to 1,024", _whole(1, 1024)),
    "nodes": ("a whole number from 1 to 100,000", _whole(1, 100_000)),
    "tier": ("a whole number from 1 to 10^6", _whole(1, MAX_TIER)),
    "priority": ("a number within +-10^9", lambda v: _number(v) and abs(v) <= 1e9),
    "team": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "gpu_type": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "topology": ('"nvlink" or "any"', lambda v: v in ("nvlink", "any")),
    "checkpoint_gb": ("a number from 0 to 10^9", _to_1e9),
    "checkpoint_interval_s": ("a number of seconds from 0 to 10^9", _to_1e9),
    "restore_s": ("a number of seconds from 0 to 10^9", _to_1e9),
    "barrier_s": ("a number of seconds from 0 to 10^9", _to_1e9),
    "cleanup_s": ("a number of seconds from 0 to 10^9", _to_1e9),
    "signal": ("a signal name or null", lambda v: v is None or isinstance(v, str)),
    "time_limit_s": ("null or a number of seconds from above 0 to 10^9",
                     lambda v: v is None or (_to_1e9(v) and v > 0)),
    "extra": ("an object", lambda v: isinstance(v, dict)),
}


def load_jsonl(path: str | Path) -> list[TraceJob]:
    """Native trace: one JSON object per line with the fields of :class:`TraceJob`
    (``submit`` as epoch seconds or ISO-8601). Blank lines and ``#`` lines are skipped."""
    path = Path(path)
    if not path.exists():
        path = resolve_trace_path(path)
    errors: list[str] = []
    jobs = []
    for n, line in enumerate(read_trace_text(path).splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            d = json.loads(s)
        except json.JSONDecodeError as exc:
            errors.append(f"line {n}: malformed JSON: {exc.msg}")
            continue
        except (RecursionError, ValueError):
            errors.append(f"line {n}: malformed JSON (nested too deep, or a number of "
                          "thousands of digits)")
            continue
        if not isinstance(d, dict):
            errors.append(f"line {n}: must be a JSON object")
            continue
        missing = [k for k in _REQUIRED if k not in d]
        unknown = sorted(set(d) - _FIELDS)
        if missing:
            errors.append(f"line {n}: missing field(s) {missing}")
        if unknown:
            errors.append(f"line {n}: unknown field(s) {unknown}")
        if missing or unknown:
            continue
        bad = field_problems(d, _ROW_RULES)
        if bad:
            errors += [f"line {n}: {b}" for b in bad]
            continue
        try:
            d["submit"] = parse_epoch(d["submit"], f"line {n}: submit")
            job = TraceJob(**d)
        except (TypeError, InputError) as exc:
            errors.append(f"line {n}: {exc}")
            continue
        if not in_contract_time(job.submit):
            errors.append(f"line {n}: submit: outside 1970-01-01 to 9000-01-01")
            continue
        jobs.append(job)
    ids = [j.id for j in jobs]
    if len(set(ids)) != len(ids):
        errors.append("duplicate job ids")
    if errors:
        raise InputError(errors, str(path))
    jobs.sort(key=lambda j: (j.submit, j.id))
    return jobs


def write_jsonl(jobs: Iterable[TraceJob], path: str | Path) -> None:
    with open(path, "w") as fh:
        fh.writelines(json.dumps(j.to_json(), sort_keys=True) + "\n" for j in jobs)


def detect_format(path: str | Path) -> str:
    p = resolve_trace_path(path)
    if p.suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    # the first line that is not blank nor a # comment (JSONL's)
    head = next((line for line in read_trace_text(p).splitlines()
                 if line.strip() and not line.startswith("#")), "")
    if head.startswith("timestamp,") or "num_gpus" in head:
        return "philly"
    if "num_gpu" in head and "qos" in head:
        return "openb"
    if head.lstrip().startswith("{"):
        return "jsonl"
    raise InputError([f"trace: cannot tell the format of {str(path)!r} (philly, openb or jsonl)"])


def load_trace(path: str | Path, fmt: str = "auto", *, seed: int = 0, node_gpus: int = 8,
               time_scale: float = 1.0, tier_rule: TierRule | None = None) -> list[TraceJob]:
    """Load any supported trace; ``fmt`` is ``auto``, ``philly``, ``openb`` or ``jsonl``.
    ``tier_rule`` replaces the format's tiers (a JSONL trace's own ones too)."""
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "philly":
        jobs = load_philly(path, seed=seed, node_gpus=node_gpus, tier_rule=tier_rule)
    elif fmt == "openb":
        jobs = load_openb(path, seed=seed, node_gpus=node_gpus, time_scale=time_scale,
                          tier_rule=tier_rule)
        time_scale = 1.0
    elif fmt == "jsonl":
        jobs = load_jsonl(path)
        if tier_rule is not None:
            for j in jobs:
                j.tier = tier_rule.tier(j.team, j.gpus, j.duration_s, seed)
    else:
        raise InputError([f"trace format {fmt!r} unknown (auto, philly, openb, jsonl)"])
    if time_scale != 1.0 and jobs:
        t0 = jobs[0].submit
        for j in jobs:
            j.submit = t0 + (j.submit - t0) * time_scale
    return jobs


def slice_trace(jobs: list[TraceJob], start: float | None = None, days: float | None = None,
                carry_over: bool = False) -> list[TraceJob]:
    """Jobs submitted in ``[start, start + days)`` (start defaults to the first arrival).

    With ``carry_over``, jobs submitted before ``start`` that would still be running
    at ``start`` had each started at its submission (``submit + duration > start``)
    are added too, arriving at ``start`` with only their remaining run time; they
    are marked ``extra["carry_over"]`` (a warm start: the cluster does not begin
    empty)."""
    if not jobs:
        return []
    t0 = jobs[0].submit if start is None else start
    t1 = math.inf if days is None else t0 + days * 86400.0
    out = []
    if carry_over:
        for j in jobs:
            if j.submit < t0 and j.submit + j.duration_s > t0:
                left = j.submit + j.duration_s - t0
                limit = (None if j.time_limit_s is None  # (what is left of it at t0)
                         else max(left, j.time_limit_s - (t0 - j.submit)))
                c = TraceJob(**{**j.__dict__, "submit": t0, "duration_s": left,
                                "time_limit_s": limit,
                                "extra": {**j.extra, "carry_over": True,
                                          "original_submit": j.submit}})
                out.append(c)
    out += [j for j in jobs if t0 <= j.submit < t1]
    out.sort(key=lambda j: (j.submit, j.id))
    return out
