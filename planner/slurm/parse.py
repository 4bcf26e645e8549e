"""Slurm JSON -> contract snapshot (a plain dict, validated later by ``models``).

Two shapes of Slurm output are understood, value by value, so one parser reads
both and mixtures of them:

- Slurm 22.05 (``openapi/v0.0.38``): scalar numbers and times, ``job_state`` a
  string, ``sinfo --json`` one record per node with ``state`` + ``state_flags``.
- Slurm 23.02+ (``data_parser/v0.0.39..``): numbers and times as
  ``{"set": bool, "infinite": bool, "number": n}``, ``job_state`` and node
  ``state`` arrays of flags; per-node state comes from
  ``scontrol show nodes --json`` (``sinfo --json`` groups nodes and is also read).

GPU indices of running jobs come from ``gres_detail`` (one entry per allocated
node, ``gpu:4(IDX:0-3)`` or ``gpu:a100:2(IDX:0,2)``). Checkpoint metadata comes
from the job comment (``key=value`` pairs or a JSON object) and the sidecar file
written by ``planner.trap``; the sidecar wins, being measured. ``restart_cnt``
gives ``preemptions``; the adapter state gives ``last_preempted_at`` and the
evictions it carried out (``recent_evictions``, R15); ``end_time`` (Slurm's
EndTime, start plus the enforced time limit) gives a running job's
``expected_end_at`` (R17), and ``submit_time`` a pending job's ``submitted_at``
(R16).

Nothing here runs a command; :func:`build_snapshot` is a pure function of its
inputs so it is tested on recorded JSON.
"""

from __future__ import annotations

import json
import math
import re
import signal as _signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from models import SHAPE_ERRORS, InputError
from models.policy import MAX_GB, MAX_PRIORITY, MAX_SECONDS
from planner.slurm.config import SlurmConfig
from planner.slurm.hostlist import HostlistError, expand
from planner.slurm.state import AdapterState

# ----------------------------------------------------------------- scalars


def num(value: Any) -> float | None:
    """A Slurm number in either shape; None when unset or infinite.

    >>> num(5), num({"set": True, "infinite": False, "number": 5}), num({"set": False})
    (5, 5, None)
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
        if value is None or isinstance(value, bool):
            return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def as_int(value: Any, default: int = 0) -> int:
    n = num(value)
    return default if n is None else int(n)


def states_of(value: Any) -> list[str]:
    """Job or node state flags, upper case (``"mixed"`` and ``["MIXED"]`` alike)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    out = []
    for item in items:
        for part in str(item).replace("+", " ").split():
            part = re.sub(r"[^A-Za-z_]", "", part).upper()
            if part:
                out.append(part)
    return out


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> float | None:
    """Epoch seconds from a number, a Slurm number object or an ISO-8601 string."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return dt.timestamp()
    n = num(value)
    return None if n is None or n <= 0 else float(n)


# -------------------------------------------------------------------- GRES

_GPU_ITEM = re.compile(
    r"^gpu(?::(?P<type>[^:(),=]+))?:(?P<count>\d+)(?:\((?P<extra>[^)]*)\))?$")
_GPU_REQUEST = re.compile(r"(?:^|,)\s*(?:gres[:/])?gpu(?::(?P<type>[^:,=]+))?[:=](?P<count>\d+)")


@dataclass(frozen=True)
class GresItem:
    type: str | None
    count: int
    indices: tuple[int, ...] | None  # None when not reported


def _split_outside_parens(text: str) -> list[str]:
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [p for p in out if p]


def parse_index_list(text: str) -> tuple[int, ...] | None:
    """``0-3,5`` -> (0, 1, 2, 3, 5); ``N/A`` -> None."""
    text = text.strip()
    if not text or text.upper() == "N/A":
        return None
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"bad GPU index list {text!r}")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def parse_gres(text: str | None) -> list[GresItem]:
    """The GPU entries of a GRES string (``gpu:a100:2(IDX:0,2),nic:1``)."""
    if not text or text in ("(null)", "N/A"):
        return []
    items = []
    for part in _split_outside_parens(text):
        m = _GPU_ITEM.match(part)
        if not m:
            continue  # another GRES (nic, tmpsize, shard, ...)
        indices = None
        extra = m.group("extra") or ""
        for field_ in re.split(r"\s+(?=[A-Z]+:)", extra):
            if field_.startswith("IDX:"):
                indices = parse_index_list(field_[4:])
        items.append(GresItem(m.group("type"), int(m.group("count")), indices))
    return items


def parse_gpu_request(text: str | None) -> tuple[int, str | None] | None:
    """GPU count and type requested in a TRES string (``gres:gpu:8``, ``gres/gpu:a100:2``)."""
    if not text:
        return None
    total, types = 0, set()
    for m in _GPU_REQUEST.finditer(text):
        total += int(m.group("count"))
        types.add(m.group("type"))
    if not total:
        return None
    return total, (types.pop() if len(types) == 1 else None)


# ----------------------------------------------------- comment and sidecar

_CATCHABLE = {s.name for s in _signal.Signals} - {"SIGKILL", "SIGSTOP"}
_NUM_KEYS = ("size_gb", "barrier_s", "cleanup_s", "restore_s")
CHECKPOINT_KEYS = (*_NUM_KEYS, "signal", "last_at")
JOB_KEYS = ("priority", "team", "topology", "same_block", "same_nvlink_domain")


def normalize_signal(value: Any) -> str | None:
    """``TERM``, ``SIGTERM``, ``15`` -> ``SIGTERM``; ``none`` -> None; else ValueError."""
    if value is None:
        return None
    text = str(value).strip()
    if text.lower() in ("", "none", "null", "no", "false"):
        return None
    if text.isdigit():
        try:
            name = _signal.Signals(int(text)).name
        except ValueError as exc:
            raise ValueError(f"unknown signal number {text}") from exc
    else:
        name = text.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
    if name not in _CATCHABLE:
        raise ValueError(f"signal {text!r} is not a catchable signal")
    return name


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def coerce_field(key: str, value: Any) -> Any:
    """Check and convert one comment/sidecar value; ValueError when bad."""
    if key in _NUM_KEYS:
        if isinstance(value, bool):
            raise ValueError(f"{key} must be a number")
        x = float(value)
        top = MAX_GB if key == "size_gb" else MAX_SECONDS
        if not math.isfinite(x) or x < 0 or x > top:
            raise ValueError(f"{key} must be a number from 0 to {top:g}")
        return x
    if key == "signal":
        return normalize_signal(value)
    if key == "last_at":
        t = parse_time(value)
        if t is None:
            raise ValueError(f"last_at {value!r} is not a time")
        return t
    if key == "priority":
        if isinstance(value, bool) or float(value) != int(float(value)):
            raise ValueError("priority must be an integer")
        if abs(int(float(value))) > MAX_PRIORITY:
            raise ValueError(f"priority must be within +-{MAX_PRIORITY:g}")
        return int(float(value))
    if key == "team":
        return str(value)
    if key == "topology":
        if value not in ("nvlink", "any"):
            raise ValueError('topology must be "nvlink" or "any"')
        return value
    if key in ("same_block", "same_nvlink_domain"):
        return _bool(value)
    raise KeyError(key)


def parse_comment(text: str | None) -> tuple[dict[str, Any], list[str]]:
    """Planner fields from a job comment; returns (fields, problems).

    Two forms (documented in docs/slurm.md):

    - ``key=value`` pairs separated by spaces, commas or semicolons, anywhere in
      the comment (other words are ignored), e.g.
      ``preempt: size_gb=40 signal=USR1 barrier_s=10 restore_s=600``;
    - a JSON object, its fields either at the top or under ``"preempt"``.

    Known keys: size_gb, signal, barrier_s, cleanup_s, restore_s, last_at,
    priority, team, topology, same_block, same_nvlink_domain.
    """
    if not text or not text.strip():
        return {}, []
    text = text.strip()
    raw: dict[str, Any] = {}
    problems: list[str] = []
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return {}, [f"comment is not valid JSON ({exc.msg})"]
        if not isinstance(data, dict):
            return {}, ["comment JSON is not an object"]
        if isinstance(data.get("preempt"), dict):
            data = {**data, **data["preempt"]}
        raw = {k: v for k, v in data.items() if k in CHECKPOINT_KEYS + JOB_KEYS}
    else:
        for token in re.split(r"[\s,;]+", text):
            key, sep, value = token.partition("=")
            if sep and key in CHECKPOINT_KEYS + JOB_KEYS:
                raw[key] = value
    out: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            out[key] = coerce_field(key, value)
        except (ValueError, TypeError) as exc:
            problems.append(f"comment {key}: {exc}")
    return out, problems


def read_sidecar_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    """Checkpoint fields from a trap sidecar; ({}, []) when there is none."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, []
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        return {}, [f"sidecar {path}: unreadable ({exc})"]
    if not isinstance(data, dict):
        return {}, [f"sidecar {path}: not a JSON object"]
    out: dict[str, Any] = {}
    problems = []
    for key in CHECKPOINT_KEYS:
        if key in data:
            try:
                out[key] = coerce_field(key, data[key])
            except (ValueError, TypeError) as exc:
                problems.append(f"sidecar {path} {key}: {exc}")
    return out, problems


SidecarReader = Callable[[str], tuple[dict[str, Any], list[str]]]


def sidecar_reader(directory: Path | None) -> SidecarReader:
    """Reads ``<directory>/<slurm job id>.json`` (nothing when `directory` is None)."""
    def read(job_id: str) -> tuple[dict[str, Any], list[str]]:
        if directory is None:
            return {}, []
        return read_sidecar_file(Path(directory) / f"{job_id}.json")
    return read


# ------------------------------------------------------------------- nodes

_DOWN = {"DOWN", "ERROR", "FUTURE", "UNKNOWN", "NOT_RESPONDING", "NO_RESPOND", "POWERED_DOWN",
         "POWERING_DOWN", "POWERING_UP", "POWER_UP", "REBOOT_ISSUED", "INVALID", "INVALID_REG",
         "CLOUD"}
_DRAIN = {"DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "MAINTENANCE", "MAINT", "RESERVED",
          "REBOOT_REQUESTED", "POWER_DOWN", "POWER_DRAIN", "INVALID_STATE"}
_RANK = {"up": 0, "drain": 1, "down": 2}


def node_state(flags: Iterable[str]) -> str:
    """Contract node state from Slurm node state flags (the worst one wins)."""
    flags = set(flags)
    if not flags or flags & _DOWN:
        return "down"
    if flags & _DRAIN:
        return "drain"
    return "up"


@dataclass
class SlurmNode:
    name: str
    flags: list[str]
    gres: str
    partitions: set[str] = field(default_factory=set)
    reason: str = ""


def read_nodes(nodes_json: Mapping[str, Any]) -> dict[str, SlurmNode]:
    """Per-node records from ``sinfo --json`` (any version) or ``scontrol show nodes --json``."""
    out: dict[str, SlurmNode] = {}

    def add(name: str, flags: list[str], gres: str, parts: Iterable[str], reason: str) -> None:
        node = out.get(name)
        if node is None:
            out[name] = SlurmNode(name, flags, gres or "", set(parts), reason or "")
        else:
            node.partitions.update(parts)
            if not node.gres and gres:
                node.gres = gres

    for rec in nodes_json.get("nodes") or []:  # sinfo v0.0.38 and scontrol --json
        if not isinstance(rec, dict):
            continue
        name = rec.get("name") or rec.get("hostname")
        if not name:
            continue
        flags = states_of(rec.get("state")) + states_of(rec.get("state_flags"))
        parts = rec.get("partitions") or []
        if isinstance(parts, str):
            parts = parts.split(",")
        add(name, flags, rec.get("gres") or "", parts, rec.get("reason") or "")
    for grp in nodes_json.get("sinfo") or []:  # sinfo data_parser: groups of nodes
        if not isinstance(grp, dict):
            continue
        names = (grp.get("nodes") or {}).get("nodes") or []
        if isinstance(names, str):
            names = expand(names)
        flags = states_of((grp.get("node") or {}).get("state"))
        gres = grp.get("gres") or {}
        gres_total = gres.get("total", "") if isinstance(gres, dict) else str(gres)
        part = (grp.get("partition") or {}).get("name")
        for name in names:
            add(name, flags, gres_total, [part] if part else [], grp.get("reason") or "")
    return out


def _rule_matches(rule_match: str, name: str) -> bool:
    if any(c in rule_match for c in "*?") and "[" not in rule_match:
        return fnmatchcase(name, rule_match)
    try:
        return name in expand(rule_match)
    except HostlistError:
        return fnmatchcase(name, rule_match)


def build_nodes(slurm_nodes: Mapping[str, SlurmNode], cfg: SlurmConfig,
                notes: list[str]) -> list[dict[str, Any]]:
    out = []
    skipped = []
    for name in sorted(slurm_nodes, key=_natural):
        sn = slurm_nodes[name]
        gpus = parse_gres(sn.gres)
        count = sum(g.count for g in gpus)
        if count <= 0:
            skipped.append(name)
            continue
        types = {g.type for g in gpus}
        gtype = types.pop() if len(types) == 1 else None
        node: dict[str, Any] = {"id": name, "gpus": count,
                                "gpu_type": cfg.gpu_types.get(gtype, gtype) if gtype else None,
                                "state": node_state(sn.flags)}
        for rule in cfg.nodes:
            if not _rule_matches(rule.match, name):
                continue
            if rule.partitions is not None and not (sn.partitions & set(rule.partitions)):
                continue
            for key, value in rule.model_dump(exclude={"match", "partitions"}).items():
                if value is None:
                    continue
                if key == "state":
                    if _RANK[value] > _RANK[node["state"]]:
                        node["state"] = value
                else:
                    node[key] = value
        out.append(node)
    if skipped:
        notes.append(f"{len(skipped)} node(s) without GPUs left out: {', '.join(skipped[:10])}"
                     + (" ..." if len(skipped) > 10 else ""))
    return out


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


# -------------------------------------------------------------------- jobs

_RUNNING = {"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING",
            "STAGE_OUT"}
_HELD_FLAGS = {"REQUEUE_HOLD", "SPECIAL_EXIT", "REQUEUED", "RESV_DEL_HOLD", "REQUEUE_FED"}
_SKIP_REASONS = {"Dependency", "DependencyNeverSatisfied", "BeginTime", "PartitionDown",
                 "PartitionInactive", "InvalidAccount", "InvalidQOS", "BadConstraints",
                 "FrontEndDown", "Licenses", "DeadLine", "JobArrayTaskLimit",
                 "BurstBufferResources", "BurstBufferStageIn", "SystemFailure", "NodeDown",
                 "Reservation", "ReservationDeleted", "PartitionConfig"}


def _job_nodes(job: Mapping[str, Any]) -> list[str]:
    """Allocated nodes in allocation order (the order of ``gres_detail``)."""
    res = job.get("job_resources")
    if isinstance(res, dict):
        alloc = res.get("allocated_nodes")  # v0.0.38 .. v0.0.40
        if isinstance(alloc, list) and alloc:
            names = [a.get("nodename") or a.get("name") for a in alloc if isinstance(a, dict)]
            if all(names):
                return [str(n) for n in names]
        nodes = res.get("nodes")  # v0.0.41+: {"count", "list", "allocation": [...]}
        if isinstance(nodes, dict):
            alloc = nodes.get("allocation")
            if isinstance(alloc, list) and alloc:
                names = [a.get("name") for a in alloc if isinstance(a, dict)]
                if all(names):
                    return [str(n) for n in names]
            if nodes.get("list"):
                return expand(nodes["list"])
    return expand(job.get("nodes") or "")


def _tier_of(job: Mapping[str, Any], cfg: SlurmConfig) -> int | None:
    qos = job.get("qos") or ""
    if qos in cfg.tiers.qos:
        return cfg.tiers.qos[qos]
    parts = [p for p in str(job.get("partition") or "").split(",") if p]
    mapped = [cfg.tiers.partitions[p] for p in parts if p in cfg.tiers.partitions]
    if mapped:
        return min(mapped)
    return cfg.tiers.default


def _gpu_request(job: Mapping[str, Any], nodes: int) -> tuple[int, str | None] | str:
    """GPUs per node and type a pending job asks for, or why it cannot be told."""
    per_node = parse_gpu_request(job.get("tres_per_node"))
    if per_node:
        return per_node
    per_job = parse_gpu_request(job.get("tres_per_job"))
    if per_job:
        total, gtype = per_job
        if total % nodes:
            return f"{total} GPUs per job do not divide over {nodes} node(s)"
        return total // nodes, gtype
    per_task = parse_gpu_request(job.get("tres_per_task"))
    if per_task:
        per_node_tasks = as_int(job.get("tasks_per_node"), 0)
        if per_node_tasks <= 0 and nodes == 1:
            per_node_tasks = as_int(job.get("tasks"), 0)
        if per_node_tasks <= 0:
            return "GPUs per task without a fixed task count per node (--ntasks-per-node)"
        return per_task[0] * per_node_tasks, per_task[1]
    if parse_gpu_request(job.get("tres_per_socket")):
        return "GPUs per socket are not supported"
    return 0, None


@dataclass
class ParseResult:
    snapshot: dict[str, Any]
    notes: list[str]
    slurm_version: str


def slurm_version(squeue_json: Mapping[str, Any]) -> str:
    """``22.05.8`` etc. from the ``meta`` block of any Slurm JSON output."""
    meta = squeue_json.get("meta") or {}
    for key in ("Slurm", "slurm"):
        block = meta.get(key) or {}
        if block.get("release"):
            return str(block["release"])
        v = block.get("version") or {}
        if v:
            return f"{v.get('major', '?')}.{v.get('minor', '?')}.{v.get('micro', '?')}"
    return "unknown"


def build_snapshot(squeue_json: Mapping[str, Any], nodes_json: Mapping[str, Any],
                   cfg: SlurmConfig, *, now: float,
                   read_sidecar: SidecarReader | None = None,
                   state: AdapterState | None = None) -> ParseResult:
    """The contract snapshot for one tick.

    `squeue_json` is ``squeue --json``; `nodes_json` is ``sinfo --json`` or
    ``scontrol show nodes --json`` (either Slurm shape); `now` is epoch seconds.
    Jobs the planner cannot or must not act on are left out, each with a note.
    """
    try:
        return _build(squeue_json, nodes_json, cfg, now, read_sidecar, state)
    except InputError:
        raise
    except SHAPE_ERRORS as exc:  # (not where a job or a node list names it)
        raise _shape_error("squeue --json", "", exc) from None


def _shape_error(source: str, where: str, exc: Exception) -> InputError:
    return InputError([(f"{where}a field has a value of the wrong type or range "
                       f"({type(exc).__name__}: {exc})")], source)


def _build(squeue_json: Mapping[str, Any], nodes_json: Mapping[str, Any], cfg: SlurmConfig,
           now: float, read_sidecar: SidecarReader | None,
           state: AdapterState | None) -> ParseResult:
    notes: list[str] = []
    state = state or AdapterState()
    read_sidecar = read_sidecar or sidecar_reader(cfg.sidecar_dir)
    try:
        slurm_nodes = read_nodes(nodes_json)
        nodes = build_nodes(slurm_nodes, cfg, notes)
    except SHAPE_ERRORS as exc:
        raise _shape_error("sinfo --json", "nodes: ", exc) from None
    node_gpus = {n["id"]: n["gpus"] for n in nodes}
    jobs: list[dict[str, Any]] = []
    unmanaged_used = False
    for i, raw in enumerate(squeue_json.get("jobs") or []):
        if not isinstance(raw, dict) or raw.get("job_id") is None:
            continue
        try:
            jid = str(as_int(raw.get("job_id")))
        except SHAPE_ERRORS as exc:
            raise _shape_error("squeue --json", f"jobs[{i}]: ", exc) from None
        try:
            unmanaged_used |= _add_job(raw, jid, cfg, now, node_gpus, read_sidecar, state,
                                       notes, jobs)
        except SHAPE_ERRORS as exc:
            raise _shape_error("squeue --json", f"jobs[{i}] (job {jid}): ", exc) from None
    policy = cfg.policy_dict()
    if unmanaged_used:
        tiers = dict(policy.get("tiers") or {})
        key = str(cfg.tiers.unmanaged)
        if key not in tiers and cfg.tiers.unmanaged not in tiers:
            tiers[key] = {"preemptible": False, "min_runtime_s": 0, "can_preempt": []}
            policy["tiers"] = tiers
    version = slurm_version(squeue_json)
    snapshot = {
        "version": 1,
        "now": iso(now),
        "storage": [dict(s) for s in cfg.storage],
        "nodes": nodes,
        "jobs": jobs,
        "policy": policy,
        # the evictions this adapter carried out (state file), for R15
        "recent_evictions": state.recent_evictions(now),
        "_slurm": {"release": version, "notes": notes},
    }
    return ParseResult(snapshot, notes, version)


def _add_job(raw: Mapping[str, Any], jid: str, cfg: SlurmConfig, now: float,
             node_gpus: dict[str, int], read_sidecar: SidecarReader, state: AdapterState,
             notes: list[str], jobs: list[dict[str, Any]]) -> bool:
    """Append the snapshot job(s) of one squeue record; True when a running job of
    no managed tier was added (its tier must then be in the policy)."""
    flags = states_of(raw.get("job_state"))
    base = flags[0] if flags else ""
    tier = _tier_of(raw, cfg)
    if "COMPLETING" in flags:
        return False  # leaving; its GPUs are about to be free
    if base in _RUNNING:
        built = _running_job(raw, jid, tier, cfg, now, node_gpus, read_sidecar, state, notes)
        jobs.extend(built)
        return bool(built) and tier is None
    if base == "PENDING" and not set(flags) & _HELD_FLAGS and tier is not None:
        # (a pending job of no managed tier is left to Slurm)
        job = _pending_job(raw, jid, tier, cfg, now, read_sidecar, state, notes)
        if job:
            jobs.append(job)
    return False


def _checkpoint(raw: Mapping[str, Any], jid: str, cfg: SlurmConfig, now: float,
                started: float | None, read_sidecar: SidecarReader,
                notes: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(checkpoint, extra job fields): defaults < comment < sidecar."""
    comment, problems = parse_comment(raw.get("comment"))
    side, side_problems = read_sidecar(jid)
    notes.extend(f"job {jid}: {p}" for p in problems + side_problems)
    ckpt: dict[str, Any] = cfg.job_defaults.checkpoint.model_dump()
    for source in (comment, side):
        ckpt.update({k: v for k, v in source.items() if k in CHECKPOINT_KEYS})
    last_at = ckpt.pop("last_at", None)
    if last_at is not None and (started is None or last_at >= started):
        ckpt["last_at"] = iso(min(last_at, now))
    if ckpt.get("signal") is not None:
        try:
            ckpt["signal"] = normalize_signal(ckpt["signal"])
        except ValueError as exc:
            notes.append(f"job {jid}: default signal: {exc}")
            ckpt["signal"] = None
    extra = {k: v for k, v in comment.items() if k in JOB_KEYS}
    return ckpt, extra


def _common(raw: Mapping[str, Any], jid: str, tier: int, cfg: SlurmConfig,
            state: AdapterState) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": jid,
        "tier": tier,
        "team": (raw.get("account") or raw.get("user_name") or None),
        "topology": cfg.job_defaults.topology,
        "preemptions": max(0, as_int(raw.get("restart_cnt"), 0)),
    }
    rec = state.preempted.get(jid)
    if rec and rec.get("at") and job["preemptions"] >= 1:
        job["last_preempted_at"] = rec["at"]
    return job


def _running_job(raw: Mapping[str, Any], jid: str, tier: int | None, cfg: SlurmConfig,
                 now: float, node_gpus: Mapping[str, int], read_sidecar: SidecarReader,
                 state: AdapterState, notes: list[str]) -> list[dict[str, Any]]:
    detail = raw.get("gres_detail") or []
    if not detail:
        return []  # no GPUs: not the planner's business
    try:
        names = _job_nodes(raw)
    except HostlistError as exc:
        notes.append(f"job {jid}: bad node list ({exc}); left out")
        return []
    if len(names) != len(detail):
        notes.append(f"job {jid}: {len(names)} node(s) but {len(detail)} gres_detail "
                     "entries; left out")
        return []
    parts: list[tuple[str, list[int]]] = []
    for name, gres in zip(names, detail, strict=True):
        try:
            items = parse_gres(gres)
        except ValueError as exc:
            notes.append(f"job {jid}: {exc}; left out")
            return []
        if not items:
            continue
        if any(i.indices is None for i in items):
            notes.append(f"job {jid}: no GPU indices on {name} ({gres!r}); left out")
            return []
        gpus = sorted({g for i in items for g in i.indices or ()})
        if name not in node_gpus:
            notes.append(f"job {jid}: runs on {name}, which is not a GPU node of the snapshot; "
                         "left out")
            return []
        parts.append((name, gpus))
    if not parts:
        return []
    started = parse_time(raw.get("start_time"))
    started = min(started, now) if started is not None else now
    effective_tier = tier if tier is not None else cfg.tiers.unmanaged
    ckpt, extra = _checkpoint(raw, jid, cfg, now, started, read_sidecar, notes)
    base = _common(raw, jid, effective_tier, cfg, state)
    base.update(extra)
    base.update({"state": "running", "started_at": iso(started), "checkpoint": ckpt})
    ends = _end_time(raw, started)
    if ends is not None:
        base["expected_end_at"] = iso(ends)
    sizes = {len(g) for _, g in parts}
    if len(sizes) == 1:
        job = dict(base, gpus_per_node=sizes.pop(), nodes=len(parts),
                   placement=[{"node": n, "gpus": g} for n, g in parts],
                   _slurm={"job_id": jid, "partition": raw.get("partition")})
        return [job]
    # Uneven GPUs per node (e.g. --gpus=12 over 2 nodes): the contract needs the
    # same count on every node, so each node becomes a piece "<id>@<node>";
    # evicting any piece evicts the whole Slurm job.
    notes.append(f"job {jid}: uneven GPUs per node {[len(g) for _, g in parts]}; "
                 "split into per-node pieces")
    out = []
    for name, gpus in parts:
        piece = dict(base, id=f"{jid}@{name}", gpus_per_node=len(gpus), nodes=1,
                     placement=[{"node": name, "gpus": gpus}],
                     checkpoint=dict(ckpt, size_gb=ckpt["size_gb"] / len(parts)),
                     _slurm={"job_id": jid, "partition": raw.get("partition"),
                             "piece_of": jid})
        out.append(piece)
    return out


def _end_time(raw: Mapping[str, Any], started: float) -> float | None:
    """R17: Slurm's EndTime of a running job, the limit slurmctld enforces (start +
    time limit); None when the job has no limit (``time_limit`` infinite) or Slurm
    reports none."""
    limit = raw.get("time_limit")
    if isinstance(limit, dict) and limit.get("infinite"):
        return None
    end = parse_time(raw.get("end_time"))
    return end if end is not None and end >= started else None


def _pending_job(raw: Mapping[str, Any], jid: str, tier: int, cfg: SlurmConfig, now: float,
                 read_sidecar: SidecarReader, state: AdapterState,
                 notes: list[str]) -> dict[str, Any] | None:
    reason = str(raw.get("state_reason") or "")
    priority = num(raw.get("priority"))
    if priority == 0 or reason.startswith("JobHeld"):
        return None  # held by a user or an admin: not to be started
    eligible = parse_time(raw.get("eligible_time"))
    restarts = max(0, as_int(raw.get("restart_cnt"), 0))
    rec = state.preempted.get(jid)
    if eligible is not None and eligible > now + 1 and not (rec and restarts >= 1):
        notes.append(f"job {jid}: not eligible before {iso(eligible)}; left out")
        return None
    if (reason in _SKIP_REASONS and reason != "BeginTime") or "Limit" in reason \
            or reason.startswith("Dependency"):
        notes.append(f"job {jid}: pending for {reason}, which evictions cannot fix; left out")
        return None
    if raw.get("features") or raw.get("excluded_nodes"):
        notes.append(f"job {jid}: has node constraints (features/excluded nodes) the planner "
                     "does not model; left out")
        return None
    required = raw.get("required_nodes") or ""
    if required:
        try:
            req = expand(required)
        except HostlistError:
            req = [required]
        if sorted(req) != sorted(state.pinned.get(jid, [])):
            notes.append(f"job {jid}: user-required nodes {required}; left out")
            return None
    nodes = max(1, as_int(raw.get("node_count"), 1))
    request = _gpu_request(raw, nodes)
    if isinstance(request, str):
        notes.append(f"job {jid}: {request}; left out")
        return None
    gpus, gtype = request
    if gpus <= 0:
        return None  # a CPU job
    ckpt, extra = _checkpoint(raw, jid, cfg, now, None, read_sidecar, notes)
    ckpt.pop("last_at", None)  # a pending job has no progress to lose
    job = _common(raw, jid, tier, cfg, state)
    job.update(extra)
    job.update({"state": "pending", "gpus_per_node": gpus, "nodes": nodes,
                "checkpoint": ckpt,
                "_slurm": {"job_id": jid, "partition": raw.get("partition"),
                           "reason": reason}})
    if gtype:
        job["gpu_type"] = cfg.gpu_types.get(gtype, gtype)
    submitted = parse_time(raw.get("submit_time"))
    if submitted is not None:
        job["submitted_at"] = iso(min(submitted, now))
    return job
