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

Running jobs Slurm cannot requeue on their own (:func:`never_victim`: array
tasks, heterogeneous job components, ``requeue`` or ``batch_flag`` false) keep
their GPUs in the non-preemptible unmanaged tier, as unmapped jobs do; pending
array records and het components are left out. A ``job_id`` that is not a whole
number (``"20_7"``) leaves its record out. Each of these is a note.

The node view is cross-checked with the job list: GPUs a node reports in use
(``gres_used``, e.g. ``gpu:a100:2(IDX:0,2)``; else ``tres_used`` ``gres/gpu=N``)
that no listed job holds (another user's job, a hidden partition, a partial
squeue) are held by a synthetic, non-preemptible ``slurm-occupied@<node>`` job,
and every disagreement is a warning. MIG slices (``gpu:1g.10gb:21``) are GPUs
without NVLink typed ``MIG-<type>``; otherwise the NVLink layout follows the GPU
model (:func:`planner.adapters.gpu_models.model_layout`) unless a config node rule sets
it, and an unknown or ambiguous model (a bare ``a100``, an SXM2 board) is
``"none"`` with a warning; GB200 nodes without a configured ``nvlink_domain`` are
one domain each, with a warning. A document of another kind (kubectl output,
a snapshot, sinfo given as squeue) is refused with one message.

Nothing here runs a command; :func:`build_snapshot` is a pure function of its
inputs so it is tested on recorded JSON.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from models import SHAPE_ERRORS, InputError
from models.policy import MAX_GB, MAX_PRIORITY, MAX_SECONDS
from planner.adapters.gpu_models import model_layout
from planner.adapters.slurm.config import ConfigError, SlurmConfig
from planner.adapters.slurm.hostlist import HostlistError, expand
from planner.adapters.slurm.scalars import (
    as_int,
    iso,
    job_id,
    normalize_signal,
    num,
    parse_time,
    states_of,
)
from planner.adapters.slurm.state import AdapterState

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

_NUM_KEYS = ("size_gb", "barrier_s", "cleanup_s", "restore_s")
CHECKPOINT_KEYS = (*_NUM_KEYS, "signal", "last_at")
JOB_KEYS = ("priority", "team", "topology", "same_block", "same_nvlink_domain")


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
        except (RecursionError, ValueError) as exc:  # (nested too deep; a huge integer)
            return {}, [f"comment is not valid JSON ({_json_refusal(exc)})"]
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


def _json_refusal(exc: Exception) -> str:
    """Why json.loads refused a text that is not a JSON document it can hold."""
    if isinstance(exc, RecursionError):
        return "nested too deep"
    return "a number has more than 4,300 digits"


MAX_SIDECAR_BYTES = 1 << 20  # 1 MiB: planner.trap writes a few hundred bytes


def read_sidecar_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    """Checkpoint fields from a trap sidecar; ({}, []) when there is none. A sidecar
    that cannot be read as a JSON object (broken, nested too deep, larger than
    MAX_SIDECAR_BYTES) is a note and counts as none: the file is the job's, and one
    job's broken file must not stop the snapshot of the whole cluster."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SIDECAR_BYTES + 1)
        if len(raw) > MAX_SIDECAR_BYTES:
            return {}, [(f"sidecar {path}: unreadable (larger than {MAX_SIDECAR_BYTES:,} "
                         "bytes)")]
        data = json.loads(raw.decode())
    except FileNotFoundError:
        return {}, []
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        return {}, [f"sidecar {path}: unreadable ({exc})"]
    except (RecursionError, ValueError) as exc:
        return {}, [f"sidecar {path}: unreadable ({_json_refusal(exc)})"]
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



# ------------------------------------------------------ foreign documents

_USE = {"squeue": "the output of `squeue --all --json`",
        "nodes": "the output of `sinfo --json` or `scontrol show nodes --json`",
        "plan": "a plan (`preempt-planner plan SNAPSHOT --format json`)"}
_ELSEWHERE = {
    "k8s": " (a Kubernetes cluster has its own adapter: `preempt-planner k8s snapshot`)",
    "snapshot": " (a snapshot is planned as it is: `preempt-planner plan FILE`)",
    "plan": " (a plan is carried out with `preempt-planner slurm apply FILE`)",
    "tick": " (its snapshot and plan are the `snapshot` and `plan` members)",
    "sacct": " (accounting records do not say which jobs hold GPUs now)",
}


def _json_type(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


_WHAT = {"tick": "a tick record of `slurm run --plan-dir`", "plan": "a preempt-planner plan",
         "snapshot": "a preempt-planner snapshot (contract v1), not Slurm output",
         "sacct": "`sacct --json` output", "squeue": "`squeue --json` output (a job list)",
         "sinfo": "`sinfo --json` output (a node list)",
         "nodes": "`sinfo --json` or `scontrol show nodes --json` output (a node list)"}


def describe_document(doc: Any) -> tuple[str, str]:
    """What a document given as Slurm JSON looks like: ``(kind, description)``, kind
    one of ``squeue``, ``nodes``, ``sacct``, ``k8s``, ``snapshot``, ``plan``,
    ``tick``, ``other`` (models.kinds recognises it; anything else with a jobs or
    a nodes list is taken for squeue's or sinfo's, whose parser names its faults)."""
    from models.kinds import recognise

    if not isinstance(doc, Mapping):
        return "other", f"a JSON {_json_type(doc)}, not a JSON object"
    seen = recognise(doc)
    name = {"k8s-snapshot": "snapshot", "sinfo": "nodes"}.get(seen.name, seen.name) \
        if seen is not None else None
    if seen is not None and seen.name == "k8s":
        if seen.detail.startswith("List of "):
            return "k8s", f"a Kubernetes {seen.detail} objects (kubectl get ... -o json)"
        how = {"PodList": " (kubectl get pods -o json)",
               "NodeList": " (kubectl get nodes -o json)"}.get(seen.detail, "")
        return "k8s", f"a Kubernetes {seen.detail}{how}"
    if seen is not None and name is not None:
        return (name if name in _USE or name in _ELSEWHERE else "other",
                _WHAT.get(seen.name, _WHAT.get(name, seen.what)))
    if isinstance(doc.get("jobs"), list):
        return "squeue", _WHAT["squeue"]
    if isinstance(doc.get("nodes"), list):
        return "nodes", _WHAT["nodes"]
    keys = ", ".join(sorted(str(k) for k in doc)[:8]) or "none"
    return "other", f"a JSON object with neither jobs nor nodes (its keys: {keys})"


def check_document(doc: Any, expected: str, source: str) -> None:
    """Refuse, with one message, a document that is not what `expected` names
    (``squeue``, ``nodes`` or ``plan``): ``this looks like X; use Y``."""
    kind, what = describe_document(doc)
    if kind == expected:
        return
    if expected == "squeue" and kind == "nodes":
        hint = " (and give this one as the node listing, --nodes-json)"
    elif expected == "nodes" and kind == "squeue":
        hint = " (and give this one as the job listing, --squeue-json)"
    else:
        hint = _ELSEWHERE.get(kind, "")
    raise InputError([f"this looks like {what}; use {_USE[expected]} here{hint}"], source)


# ------------------------------------------------------- GPU models, MIG

_MIG = re.compile(r"(?:^|[^0-9a-z])(\d+g\.\d+gb)$", re.IGNORECASE)


def mig_profile(gres_type: str | None) -> str | None:
    """The MIG profile of a GRES type (``1g.10gb``, ``nvidia_a100_3g.39gb``); None
    for a whole GPU."""
    if not gres_type:
        return None
    m = _MIG.search(gres_type)
    return m.group(1).lower() if m else None


def contract_gpu_type(gres_type: str | None, cfg: SlurmConfig) -> str | None:
    """The contract ``gpu_type`` of a Slurm GRES type: the config's ``gpu_types``
    mapping, else ``MIG-<type>`` for a MIG slice, else the type itself. Nodes and
    pending jobs go through the same function, so their types compare."""
    if not gres_type:
        return None
    if gres_type in cfg.gpu_types:
        return cfg.gpu_types[gres_type]
    if mig_profile(gres_type):
        return f"MIG-{gres_type}"
    return gres_type


# ------------------------------------------------------------------- nodes

_DOWN = {"DOWN", "ERROR", "FUTURE", "UNKNOWN", "NOT_RESPONDING", "NO_RESPOND", "POWERED_DOWN",
         "POWERING_DOWN", "POWERING_UP", "POWER_UP", "REBOOT_ISSUED", "INVALID", "INVALID_REG",
         "CLOUD"}
_DRAIN = {"DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "MAINTENANCE", "MAINT", "RESERVED",
          "REBOOT_REQUESTED", "POWER_DOWN", "POWER_DRAIN", "INVALID_STATE"}
_RANK = {"up": 0, "drain": 1, "down": 2}
_SHARED_GRES = re.compile(r"(?:^|,)\s*(?P<name>mps|shard)(?::[^:,()]+)?:(?P<count>\d+)")
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu=(?P<count>\d+)(?:,|$)")


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
    gres_used: str | None = None  # None: not reported
    tres_used: str | None = None
    features: list[str] = field(default_factory=list)
    usage_ambiguous: str = ""  # why gres_used cannot be taken as this node's


def _feature_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [f for f in re.split(r"[,&|\s]+", value) if f and f != "(null)"]
    if isinstance(value, list):
        return [str(f) for f in value if f]
    return []


_GROUPED = "`sinfo --json` reports them in records of several nodes with one gres_used"


def read_nodes(nodes_json: Mapping[str, Any]) -> dict[str, SlurmNode]:
    """Per-node records from ``sinfo --json`` (any version) or ``scontrol show nodes --json``."""
    out: dict[str, SlurmNode] = {}

    def add(name: str, flags: list[str], gres: str, parts: Iterable[str], reason: Any,
            used: Any, tres_used: Any, features: list[str], group: int) -> None:
        used = used if isinstance(used, str) else None
        tres_used = tres_used if isinstance(tres_used, str) else None
        node = out.get(name)
        if node is None:
            node = out[name] = SlurmNode(name, flags, gres or "", set(parts),
                                         reason if isinstance(reason, str) else "",
                                         used, tres_used, features)
            if group > 1:
                node.usage_ambiguous = _GROUPED
            return
        node.partitions.update(parts)
        if not node.gres and gres:
            node.gres = gres
        if used is not None and node.gres_used is not None and used != node.gres_used:
            node.usage_ambiguous = "listed twice with different GPUs in use"
        elif node.gres_used is None:
            node.gres_used = used
        if group > 1 and not node.usage_ambiguous:
            node.usage_ambiguous = _GROUPED
        node.features = node.features or features

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
        features = _feature_list(rec.get("active_features")) or _feature_list(rec.get("features"))
        add(name, flags, rec.get("gres") or "", parts, rec.get("reason") or "",
            rec.get("gres_used"), rec.get("tres_used"), features, 1)
    for grp in nodes_json.get("sinfo") or []:  # sinfo data_parser: groups of nodes
        if not isinstance(grp, dict):
            continue
        names = (grp.get("nodes") or {}).get("nodes") or []
        if isinstance(names, str):
            names = expand(names)
        flags = states_of((grp.get("node") or {}).get("state"))
        gres = grp.get("gres") or {}
        gres_total = gres.get("total", "") if isinstance(gres, dict) else str(gres)
        gres_used = gres.get("used") if isinstance(gres, dict) else None
        feats = grp.get("features") or {}
        features = (_feature_list(feats.get("active")) or _feature_list(feats.get("total"))
                    if isinstance(feats, dict) else _feature_list(feats))
        part = (grp.get("partition") or {}).get("name")
        reason = grp.get("reason")
        if isinstance(reason, dict):
            reason = reason.get("description") or ""
        for name in names:
            add(name, flags, gres_total, [part] if part else [], reason or "", gres_used,
                None, features, len(names))
    return out


@functools.lru_cache(maxsize=256)
def _hostlist_set(expr: str) -> frozenset[str] | None:
    """The names of a node rule's hostlist, once per rule (not once per node); None
    when `expr` is not a hostlist (then it is a glob)."""
    try:
        return frozenset(expand(expr))
    except HostlistError:
        return None


def _rule_matches(rule_match: str, name: str) -> bool:
    if any(c in rule_match for c in "*?") and "[" not in rule_match:
        return fnmatchcase(name, rule_match)
    names = _hostlist_set(rule_match)
    return fnmatchcase(name, rule_match) if names is None else name in names


def _short_list(names: list[str], limit: int = 10) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit
                                       else "")


def build_nodes(slurm_nodes: Mapping[str, SlurmNode], cfg: SlurmConfig,
                notes: list[str], warnings: list[str] | None = None) -> list[dict[str, Any]]:
    """Contract nodes: count, type and NVLink layout from the node's GRES (MIG
    slices are GPUs without NVLink, typed ``MIG-<type>``; the layout otherwise
    follows the GPU model, see :func:`planner.adapters.gpu_models.model_layout`), state from
    Slurm, the rest from the config's node rules (which win, except against MIG)."""
    warnings = warnings if warnings is not None else notes
    out = []
    skipped: list[str] = []
    unknown: dict[tuple[str, str], list[str]] = {}  # (model description, why) -> nodes
    nvl72: dict[str, list[str]] = {}  # model -> nodes taken as their own NVLink domain
    for name in sorted(slurm_nodes, key=_natural):
        sn = slurm_nodes[name]
        gpus = parse_gres(sn.gres)
        count = sum(g.count for g in gpus)
        if count <= 0:
            skipped.append(name)
            continue
        types: dict[str | None, int] = {}
        for g in gpus:
            types[g.type] = types.get(g.type, 0) + g.count
        mig = sorted({t for t in types if t is not None and mig_profile(t)})
        gtype = next(iter(types)) if len(types) == 1 else None
        node: dict[str, Any] = {"id": name, "gpus": count,
                                "gpu_type": contract_gpu_type(gtype, cfg),
                                "state": node_state(sn.flags)}
        if len(types) > 1:
            desc = ", ".join(f"{t or 'untyped'}:{c}" for t, c in types.items())
            warnings.append(f"node {name} has several GPU types ({desc}): its gpu_type is left "
                            "unset, so jobs that name a GPU type are not planned onto it, and "
                            'its NVLink layout is "none" unless a nodes rule says otherwise')
        why, rack = "", ""
        if mig:
            layout: str | None = "none"
        elif len(types) > 1:
            layout = "none"  # GPUs of different models are not NVLinked to one another
        else:
            named = [t for t in types if t] + [cfg.gpu_types[t] for t in types if t in
                                               cfg.gpu_types] + sn.features
            model = model_layout(named)
            layout, why = model.layout, model.why()
            rack = model.word if model.nvl72 else ""
        if layout is not None:
            node["nvlink"] = layout
        rule_nvlink = False
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
                    continue
                if mig and key in ("nvlink", "gpu_type"):
                    kept = node.get(key)
                    if value != kept:
                        warnings.append(
                            f"node {name}: its GPUs are MIG slices ({', '.join(mig)}); the "
                            f"nodes rule {rule.match!r} sets {key} {value!r}, which is "
                            f"ignored (MIG slices have no NVLink and keep their own type "
                            f"{node['gpu_type']!r})")
                    continue
                node[key] = value
                rule_nvlink |= key == "nvlink"
        if "nvlink" not in node:
            node["nvlink"] = "none"
            desc = gtype or ("untyped GRES 'gpu'" if not types or None in types else "")
            unknown.setdefault((desc, why), []).append(name)
        if rack and "nvlink_domain" not in node:
            node["nvlink_domain"] = name
            nvl72.setdefault(rack, []).append(name)
        out.append(node)
    for (desc, why), names in unknown.items():
        if why:
            head = f"NVLink layout not known for GPU model {desc!r} on {len(names)} node(s) " \
                f"({_short_list(names)}): {why};"
        else:
            feats = " and no known model in its features" if len(names) == 1 else \
                " and no known model in their features"
            head = f"NVLink layout unknown for GPU model {desc!r}{feats} on {len(names)} " \
                f"node(s) ({_short_list(names)}):"
        warnings.append(
            f"{head} assumed \"none\" (no NVLink: jobs with topology \"nvlink\" and more "
            "than one GPU cannot use them); set `nvlink` in a `nodes` rule of the config")
    for word, names in nvl72.items():
        warnings.append(
            f"{word} node(s) {_short_list(names)}: Slurm's output does not say which nodes "
            "share an NVLink domain (an NVL72 rack): each node is taken as its own domain (a "
            "job that asks for one NVLink domain stays on one node); set `nvlink_domain` in a "
            "`nodes` rule of the config")
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
OCCUPIED_PREFIX = "slurm-occupied@"
"""Id prefix of the synthetic jobs that hold GPUs Slurm reports in use but no job
of the snapshot holds (``slurm-occupied@<node>``)."""


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
    account = job.get("account") or ""
    if account in cfg.tiers.accounts:
        return cfg.tiers.accounts[account]
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


def _asks_for_gpus(job: Mapping[str, Any]) -> bool:
    return any(parse_gpu_request(job.get(k)) for k in
               ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"))


@dataclass
class TierStats:
    """How the config's tier mapping met the jobs of one snapshot."""

    gpu_jobs: int = 0  # running or pending GPU jobs in squeue
    mapped: int = 0  # ... of them with a tier
    unmapped_running: list[str] = field(default_factory=list)
    unmapped_pending: list[str] = field(default_factory=list)
    seen: dict[str, set[str]] = field(default_factory=lambda: {
        "partitions": set(), "qos": set(), "accounts": set()})

    def count(self, raw: Mapping[str, Any], jid: str, tier: int | None, running: bool) -> None:
        self.gpu_jobs += 1
        if tier is not None:
            self.mapped += 1
            return
        (self.unmapped_running if running else self.unmapped_pending).append(jid)
        for p in str(raw.get("partition") or "").split(","):
            if p:
                self.seen["partitions"].add(p)
        for key, name in (("qos", "qos"), ("account", "accounts")):
            if raw.get(key):
                self.seen[name].add(str(raw[key]))

    def what_to_map(self) -> str:
        parts = [f"{k} {', '.join(sorted(v)[:8])}" for k, v in self.seen.items() if v]
        return "; ".join(parts) or "none"


@dataclass
class ParseResult:
    snapshot: dict[str, Any]
    notes: list[str]
    slurm_version: str
    warnings: list[str] = field(default_factory=list)
    tiers: TierStats = field(default_factory=TierStats)


class TierMappingError(InputError):
    """The config maps no job to a tier (``slurm snapshot`` and ``slurm run`` refuse)."""


def tier_mapping_error(cfg: SlurmConfig, source: str = "slurm config"
                       ) -> TierMappingError | None:
    """The refusal when the config maps no job to a tier (static: no ``tiers``
    entries and no default); None when it maps some."""
    if cfg.tiers.maps_any():
        return None
    return TierMappingError([(
        "the config maps no Slurm job to a tier: every running job would enter as "
        "unmanaged (never evicted), every pending job would be left out and every plan "
        "would be empty. Add a `tiers` mapping by partition, QOS or account to the config "
        "(--config FILE or $PREEMPT_PLANNER_SLURM_CONFIG), for example "
        "`tiers: {partitions: {prod: 1, research: 2, spot: 3}}`, "
        "`tiers: {qos: {urgent: 1}}` or `tiers: {accounts: {llm-team: 2}}`, "
        "or give --default-tier N to put every job without a mapping in tier N")], source)


def tier_policy_error(cfg: SlurmConfig, source: str = "slurm config",
                      default_name: str = "tiers.default") -> InputError | None:
    """The refusal of a mapping or default to a tier the policy does not have (the
    config's ``policy`` and ``policy_file`` over the default tiers 1, 2, 3): every
    job it maps would make the snapshot bad input (the contract: a job's tier must
    be in the policy). `default_name` names the default (``--default-tier`` when
    the option gave it). None when all are in the policy, or when the policy itself
    is bad (the snapshot's check says what is wrong with it)."""
    from models import load_policy

    try:
        known = set(load_policy(cfg.policy_dict()).tiers)
    except (ConfigError, InputError):
        return None
    errors = [
        f"{default_name if where == 'tiers.default' else where}: tier {t} is not a tier of "
        f"the policy (its tiers: {', '.join(map(str, sorted(known)))}), so every job it maps "
        f"would be refused; use one of those, or add policy.tiers.{t} to the config"
        for where, t in cfg.tiers.assigned() if t not in known]
    return InputError(errors, source) if errors else None


def unmapped_jobs_error(result: ParseResult, source: str = "slurm config"
                        ) -> TierMappingError | None:
    """The refusal when squeue lists GPU jobs and the config maps none of them."""
    t = result.tiers
    if t.gpu_jobs == 0 or t.mapped > 0:
        return None
    return TierMappingError([(
        f"none of the {t.gpu_jobs} GPU job(s) in squeue maps to a tier of the config "
        f"(they have: {t.what_to_map()}): every plan would be empty. Add their "
        "partitions, QOS or accounts to `tiers` (partitions / qos / accounts) in the "
        "config, or give --default-tier N to put every job without a mapping in tier N")],
        source)


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
                   state: AdapterState | None = None,
                   sources: tuple[str, str] = ("squeue --json", "sinfo --json")
                   ) -> ParseResult:
    """The contract snapshot for one tick.

    `squeue_json` is ``squeue --json``; `nodes_json` is ``sinfo --json`` or
    ``scontrol show nodes --json`` (either Slurm shape); `now` is epoch seconds.
    Jobs the planner cannot or must not act on are left out, each with a note;
    GPUs the nodes report in use that no listed job holds are held by synthetic
    ``slurm-occupied@<node>`` jobs, each named in a warning. A document of another
    kind (kubectl output, a snapshot, sinfo given as squeue, ...) is refused with an
    InputError naming what it looks like (`sources` name the two inputs).
    """
    check_document(squeue_json, "squeue", sources[0])
    check_document(nodes_json, "nodes", sources[1])
    try:
        return _build(squeue_json, nodes_json, cfg, now, read_sidecar, state)
    except InputError:
        raise
    except ConfigError as exc:  # (the policy_file: unreadable, or tiers that collide)
        raise InputError([str(exc)], "slurm config") from None
    except SHAPE_ERRORS as exc:  # (not where a job or a node list names it)
        raise _shape_error("squeue --json", "", exc) from None


def _shape_error(source: str, where: str, exc: Exception) -> InputError:
    return InputError([(f"{where}a field has a value of the wrong type or range "
                       f"({type(exc).__name__}: {exc})")], source)


@dataclass
class _Ctx:
    """What one snapshot's conversion collects along the way."""

    cfg: SlurmConfig
    now: float
    read_sidecar: SidecarReader
    state: AdapterState
    node_gpus: dict[str, int]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    tiers: TierStats = field(default_factory=TierStats)
    unmanaged_used: bool = False
    # GPUs of listed jobs that are not in the snapshot: node -> {index: job}
    completing: dict[str, dict[int, str]] = field(default_factory=dict)
    left_out: dict[str, list[str]] = field(default_factory=dict)  # node -> running jobs
    unsaid_signal: list[str] = field(default_factory=list)  # priced with signal null


def _build(squeue_json: Mapping[str, Any], nodes_json: Mapping[str, Any], cfg: SlurmConfig,
           now: float, read_sidecar: SidecarReader | None,
           state: AdapterState | None) -> ParseResult:
    state = state or AdapterState()
    notes: list[str] = []
    warnings: list[str] = []
    try:
        slurm_nodes = read_nodes(nodes_json)
        nodes = build_nodes(slurm_nodes, cfg, notes, warnings)
    except SHAPE_ERRORS as exc:
        raise _shape_error("sinfo --json", "nodes: ", exc) from None
    ctx = _Ctx(cfg, now, read_sidecar or sidecar_reader(cfg.sidecar_dir), state,
               {n["id"]: n["gpus"] for n in nodes}, notes, warnings)
    for i, raw in enumerate(squeue_json.get("jobs") or []):
        if not isinstance(raw, dict) or raw.get("job_id") is None:
            continue
        number = job_id(raw.get("job_id"))
        if number is None:
            notes.append(f"jobs[{i}]: job_id {raw.get('job_id')!r} is not a Slurm job id (a "
                         "whole number); left out (its GPUs count as occupied where the "
                         "node's gres_used reports them)")
            continue
        jid = str(number)
        try:
            _add_job(raw, jid, ctx)
        except SHAPE_ERRORS as exc:
            raise _shape_error("squeue --json", f"jobs[{i}] (job {jid}): ", exc) from None
    _tier_warnings(ctx)
    _signal_warning(ctx)
    try:
        _cross_check(ctx, nodes, slurm_nodes)
    except SHAPE_ERRORS as exc:
        raise _shape_error("sinfo --json", "nodes: ", exc) from None
    policy = cfg.policy_dict()
    if ctx.unmanaged_used:
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
        "jobs": ctx.jobs,
        "policy": policy,
        # the evictions this adapter carried out (state file), for R15
        "recent_evictions": state.recent_evictions(now),
        # what the plan must say too (plan() copies them into plan.warnings)
        "warnings": warnings,
        "_slurm": {"release": version, "notes": notes},
    }
    return ParseResult(snapshot, notes, version, warnings, ctx.tiers)


def _tier_warnings(ctx: _Ctx) -> None:
    t, unmanaged = ctx.tiers, ctx.cfg.tiers.unmanaged
    if t.unmapped_running:
        ctx.warnings.append(
            f"tier mapping: {len(t.unmapped_running)} running GPU job(s) match no tier "
            f"(partition, QOS, account or default): they keep their GPUs in tier {unmanaged}, "
            f"not preemptible: {_short_list(t.unmapped_running)}")
    if t.unmapped_pending:
        ctx.warnings.append(
            f"tier mapping: {len(t.unmapped_pending)} pending GPU job(s) match no tier and are "
            f"left to Slurm (never placed by the planner): {_short_list(t.unmapped_pending)}")


def _signal_warning(ctx: _Ctx) -> None:
    """One warning naming the managed running jobs that no comment, sidecar or
    configured default gives a checkpoint signal (as the Kubernetes adapter's)."""
    if ctx.unsaid_signal:
        ctx.warnings.append(
            f"{len(ctx.unsaid_signal)} running job(s) say nothing about a checkpoint signal "
            "(no signal in their comment or sidecar, no job_defaults signal for their "
            "partition, QOS or account): priced as losing their work since start, signal "
            f"null ({_short_list(ctx.unsaid_signal)})")


def _add_job(raw: Mapping[str, Any], jid: str, ctx: _Ctx) -> None:
    """Append the snapshot job(s) of one squeue record."""
    flags = states_of(raw.get("job_state"))
    base = flags[0] if flags else ""
    tier = _tier_of(raw, ctx.cfg)
    if "COMPLETING" in flags:
        # leaving: its GPUs are about to be free (remembered for the node cross-check)
        for name, gpus in _allocated_gpus(raw):
            for g in gpus:
                ctx.completing.setdefault(name, {})[g] = jid
        return
    if base in _RUNNING:
        if not raw.get("gres_detail"):
            return  # no GPUs: not the planner's business
        never = never_victim(raw)
        built = _running_job(raw, jid, tier, ctx, never)
        if built or any("gpu" in str(d) for d in raw["gres_detail"]):
            ctx.tiers.count(raw, jid, tier, running=True)
        if built and never:
            ctx.notes.append(f"job {jid}: {never}: never a victim; its GPUs are occupied in "
                             f"tier {ctx.cfg.tiers.unmanaged}, not preemptible")
        ctx.jobs.extend(built)
        ctx.unmanaged_used |= bool(built) and (tier is None or bool(never))
        return
    if base != "PENDING" or not _asks_for_gpus(raw):
        return
    ctx.tiers.count(raw, jid, tier, running=False)
    if not set(flags) & _HELD_FLAGS and tier is not None:
        # (a pending job of no managed tier is left to Slurm)
        apart = _array_of(raw) or _het_of(raw)
        if apart:
            ctx.notes.append(f"job {jid}: pending, {apart}: left out (the planner places no "
                             "array task or het job component: Slurm's commands on such an id "
                             "can act on the whole array or het job)")
            return
        job = _pending_job(raw, jid, tier, ctx)
        if job:
            ctx.jobs.append(job)


_NO_VAL = 0xFFFFFFFE  # (Slurm's NO_VAL and INFINITE: a number field that is not set)


def _id_field(raw: Mapping[str, Any], key: str) -> int | None:
    """A job's array or het id field (plain or a Slurm number object); None when
    unset, 0 or NO_VAL."""
    n = num(raw.get(key))
    return int(n) if n is not None and 0 < n < _NO_VAL else None


def _task_field(raw: Mapping[str, Any]) -> int | None:
    n = num(raw.get("array_task_id"))
    return int(n) if n is not None and 0 <= n < _NO_VAL else None


def _array_of(raw: Mapping[str, Any]) -> str:
    """How a squeue record belongs to a job array (``task 7 of job array 20``,
    ``tasks 0-9 of job array 30``), or "" when it does not. Slurm keeps the array's
    id for one of its tasks, and a command on that bare id acts on every task of
    the array (update, requeuehold, release)."""
    array = _id_field(raw, "array_job_id")
    task = _task_field(raw)
    tasks = raw.get("array_task_string")
    tasks = tasks.strip() if isinstance(tasks, str) else ""
    if array is None and task is None and not tasks:
        return ""
    of = f"job array {array}" if array is not None else "a job array"
    if tasks:
        return f"tasks {tasks} of {of}"
    return f"task {task} of {of}" if task is not None else f"a record of {of}"


def _het_of(raw: Mapping[str, Any]) -> str:
    het = _id_field(raw, "het_job_id")
    return f"a component of heterogeneous job {het}" if het is not None else ""


def _flag(raw: Mapping[str, Any], key: str) -> bool | None:
    """A boolean field of a squeue record; None when missing or unreadable."""
    value = raw.get(key)
    if value is None:
        return None
    try:
        return _bool(value)
    except ValueError:
        return None


def never_victim(raw: Mapping[str, Any]) -> str:
    """Why a running job must never be evicted, or "": Slurm could not requeue it, or
    would act on more than this job:

    - a task of a job array (its bare id may name the whole array);
    - a component of a heterogeneous job (Slurm requeues a het job from its leader
      only, and then every component);
    - ``requeue`` false (``--no-requeue``, or ``JobRequeue=0``): ``requeuehold``
      is refused; a missing ``requeue`` is Slurm's default (``JobRequeue=1``);
    - ``batch_flag`` false (salloc, srun): only batch jobs are requeued; a
      missing ``batch_flag`` is not taken for a batch job (every ``squeue --json``,
      21.08 on, reports it, and Slurm has no default: it depends on the command).
    """
    why = [w for w in (_array_of(raw), _het_of(raw)) if w]
    requeue = _flag(raw, "requeue")
    if requeue is False:
        why.append("not requeueable (--no-requeue, or JobRequeue=0)")
    elif requeue is None and raw.get("requeue") is not None:
        why.append(f"not known to be requeueable (requeue {raw.get('requeue')!r})")
    batch = _flag(raw, "batch_flag")
    if batch is False:
        why.append("not a batch job (salloc or srun): Slurm requeues batch jobs only")
    elif batch is None and raw.get("batch_flag") is not None:
        why.append(f"not known to be a batch job (batch_flag {raw.get('batch_flag')!r})")
    elif batch is None:
        why.append("not known to be a batch job (squeue gives no batch_flag)")
    return "; ".join(why)


def _allocated_gpus(raw: Mapping[str, Any]) -> list[tuple[str, list[int]]]:
    """(node, GPU indices) of a job's allocation, where ``gres_detail`` tells them."""
    detail = raw.get("gres_detail") or []
    try:
        names = _job_nodes(raw)
    except HostlistError:
        return []
    if len(names) != len(detail):
        return []
    out = []
    for name, gres in zip(names, detail, strict=True):
        try:
            items = parse_gres(gres)
        except ValueError:
            continue
        if items and all(i.indices is not None for i in items):
            out.append((name, sorted({g for i in items for g in i.indices or ()})))
    return out


def _checkpoint(raw: Mapping[str, Any], jid: str, ctx: _Ctx, started: float | None,
                managed_running: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(checkpoint, extra job fields): defaults (``signal`` null unless the config
    says otherwise for the job's account, partition or QOS) < comment < sidecar. A
    managed running job that none of them gives a signal is remembered for the
    warning (:func:`_signal_warning`)."""
    cfg, now, notes = ctx.cfg, ctx.now, ctx.notes
    comment, problems = parse_comment(raw.get("comment"))
    side, side_problems = ctx.read_sidecar(jid)
    notes.extend(f"job {jid}: {p}" for p in problems + side_problems)
    where = ([p for p in str(raw.get("partition") or "").split(",") if p],
             raw.get("qos") or None, raw.get("account") or None)
    ckpt: dict[str, Any] = cfg.checkpoint_defaults(*where)
    for source in (comment, side):
        ckpt.update({k: v for k, v in source.items() if k in CHECKPOINT_KEYS})
    if managed_running and "signal" not in comment and "signal" not in side \
            and not cfg.signal_configured(*where):
        ctx.unsaid_signal.append(jid)
    last_at = ckpt.pop("last_at", None)
    if last_at is not None and (started is None or last_at >= started):
        ckpt["last_at"] = iso(min(last_at, now))
    # (every signal is normalized where it was read: comment, sidecar, config)
    extra = {k: v for k, v in comment.items() if k in JOB_KEYS}
    return ckpt, extra


def _common(raw: Mapping[str, Any], jid: str, tier: int, ctx: _Ctx) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": jid,
        "tier": tier,
        "team": (raw.get("account") or raw.get("user_name") or None),
        "topology": ctx.cfg.job_defaults.topology,
        "preemptions": max(0, as_int(raw.get("restart_cnt"), 0)),
    }
    rec = ctx.state.preempted.get(jid)
    if rec and rec.get("at") and job["preemptions"] >= 1:
        job["last_preempted_at"] = rec["at"]
    return job


def _left_out(ctx: _Ctx, jid: str, names: Iterable[str], why: str) -> list[dict[str, Any]]:
    """A running GPU job the snapshot cannot hold: a warning; its GPUs still count
    through the nodes' gres_used (the cross-check)."""
    names = [n for n in names if n]
    for n in names:
        ctx.left_out.setdefault(n, []).append(jid)
    where = f" on {', '.join(names)}" if names else ""
    ctx.warnings.append(f"job {jid}: running{where} but {why}; left out of the snapshot (its "
                        "GPUs count as occupied where the node's gres_used reports them)")
    return []


def _running_job(raw: Mapping[str, Any], jid: str, tier: int | None, ctx: _Ctx,
                 never: str = "") -> list[dict[str, Any]]:
    """The snapshot job (or per-node pieces) of a running record: in its tier, or in
    the non-preemptible unmanaged tier when it has none or `never` says why it must
    never be a victim."""
    cfg, now = ctx.cfg, ctx.now
    detail = raw.get("gres_detail") or []
    try:
        names = _job_nodes(raw)
    except HostlistError as exc:
        return _left_out(ctx, jid, [], f"its node list is unreadable ({exc})")
    if len(names) != len(detail):
        return _left_out(ctx, jid, names, f"it has {len(names)} node(s) and {len(detail)} "
                                          "gres_detail entries")
    parts: list[tuple[str, list[int]]] = []
    for name, gres in zip(names, detail, strict=True):
        try:
            items = parse_gres(gres)
        except ValueError as exc:
            return _left_out(ctx, jid, names, str(exc))
        if not items:
            continue
        if any(i.indices is None for i in items):
            return _left_out(ctx, jid, names, f"gres_detail gives no GPU indices on {name} "
                                              f"({gres!r}; IDX needs File= in gres.conf)")
        gpus = sorted({g for i in items for g in i.indices or ()})
        if name not in ctx.node_gpus:
            return _left_out(ctx, jid, [], f"{name} is not a GPU node of the snapshot")
        if gpus and gpus[-1] >= ctx.node_gpus[name]:
            return _left_out(ctx, jid, names, f"GPU {gpus[-1]} is out of range for {name} "
                                              f"({ctx.node_gpus[name]} GPUs)")
        parts.append((name, gpus))
    if not parts:
        return []
    started = parse_time(raw.get("start_time"))
    started = min(started, now) if started is not None else now
    managed = tier is not None and not never
    effective_tier = tier if managed and tier is not None else cfg.tiers.unmanaged
    ckpt, extra = _checkpoint(raw, jid, ctx, started, managed_running=managed)
    base = _common(raw, jid, effective_tier, ctx)
    base.update(extra)
    base.update({"state": "running", "started_at": iso(started), "checkpoint": ckpt})
    ends = _end_time(raw, started)
    if ends is not None:
        base["expected_end_at"] = iso(ends)
        if ends < now:
            ctx.warnings.append(f"job {jid}: still running {now - ends:.0f} s after its "
                                f"EndTime {iso(ends)} (OverTimeLimit?): not spared as "
                                "ending soon (R17)")
    meta: dict[str, Any] = {"job_id": jid, "partition": raw.get("partition")}
    if never:
        meta["never_victim"] = never
    sizes = {len(g) for _, g in parts}
    if len(sizes) == 1:
        job = dict(base, gpus_per_node=sizes.pop(), nodes=len(parts),
                   placement=[{"node": n, "gpus": g} for n, g in parts], _slurm=meta)
        return [job]
    # Uneven GPUs per node (e.g. --gpus=12 over 2 nodes): the contract needs the
    # same count on every node, so each node becomes a piece "<id>@<node>";
    # evicting any piece evicts the whole Slurm job.
    ctx.notes.append(f"job {jid}: uneven GPUs per node {[len(g) for _, g in parts]}; "
                     "split into per-node pieces")
    out = []
    for name, gpus in parts:
        piece = dict(base, id=f"{jid}@{name}", gpus_per_node=len(gpus), nodes=1,
                     placement=[{"node": name, "gpus": gpus}],
                     checkpoint=dict(ckpt, size_gb=ckpt["size_gb"] / len(parts)),
                     _slurm=dict(meta, piece_of=jid))
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


def _pending_job(raw: Mapping[str, Any], jid: str, tier: int, ctx: _Ctx
                 ) -> dict[str, Any] | None:
    cfg, now, notes, state = ctx.cfg, ctx.now, ctx.notes, ctx.state
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
    ckpt, extra = _checkpoint(raw, jid, ctx, None)
    ckpt.pop("last_at", None)  # a pending job has no progress to lose
    job = _common(raw, jid, tier, ctx)
    job.update(extra)
    job.update({"state": "pending", "gpus_per_node": gpus, "nodes": nodes,
                "checkpoint": ckpt,
                "_slurm": {"job_id": jid, "partition": raw.get("partition"),
                           "reason": reason}})
    if gtype:
        job["gpu_type"] = contract_gpu_type(gtype, cfg)
        if mig_profile(gtype) and "topology" not in extra:
            job["topology"] = "any"  # MIG slices have no NVLink: it cannot need it
    submitted = parse_time(raw.get("submit_time"))
    if submitted is not None:
        job["submitted_at"] = iso(min(submitted, now))
    return job


# ------------------------------------------------ GPUs in use: cross-check

@dataclass
class _Usage:
    text: str  # what the node reported, for messages
    count: int | None  # GPUs in use; None: not reported
    indices: set[int] | None  # which; None: no IDX


def _node_usage(sn: SlurmNode) -> _Usage:
    text = sn.gres_used
    if text is not None and text.strip() and text not in ("(null)", "N/A"):
        items = parse_gres(text)  # ValueError on a bad IDX list: the caller says so
        if not items:
            # no gpu entry at all (only other GRES): none in use
            return _Usage(text, 0, set())
        count = sum(i.count for i in items)
        if all(i.indices is not None or i.count == 0 for i in items):
            return _Usage(text, count, {g for i in items for g in i.indices or ()})
        return _Usage(text, count, None)
    m = _TRES_GPU.search(sn.tres_used or "")
    if m:
        return _Usage(f"tres_used {sn.tres_used}", int(m.group("count")), None)
    return _Usage("", None, None)


def _cross_check(ctx: _Ctx, nodes: list[dict[str, Any]],
                 slurm_nodes: Mapping[str, SlurmNode]) -> None:
    """GPUs a node reports in use (``gres_used``, else ``tres_used`` gres/gpu) that no
    job of the snapshot holds become one synthetic, non-preemptible running job per
    node, ``slurm-occupied@<node>``; every disagreement is a warning."""
    held: dict[str, dict[int, str]] = {}
    for job in ctx.jobs:
        if job["state"] != "running":
            continue
        for part in job["placement"]:
            for g in part["gpus"]:
                held.setdefault(part["node"], {})[g] = job["id"]
    no_idx: list[str] = []
    unreported: list[str] = []
    ambiguous: dict[str, list[str]] = {}  # why -> nodes
    for node in nodes:
        name, size = node["id"], node["gpus"]
        sn = slurm_nodes[name]
        if node["state"] == "down":
            continue  # no capacity: nothing to plan onto
        shared = [f"{m.group('name')}:{m.group('count')}" for m in
                  _SHARED_GRES.finditer(sn.gres_used or "") if int(m.group("count")) > 0]
        if shared:
            ctx.warnings.append(f"node {name}: shared GPU GRES in use ({', '.join(shared)}); "
                                "the GPUs they share are not seen as occupied")
        if sn.usage_ambiguous:
            ambiguous.setdefault(sn.usage_ambiguous, []).append(name)
            continue
        try:
            usage = _node_usage(sn)
        except ValueError as exc:
            ctx.warnings.append(f"node {name}: gres_used {sn.gres_used!r} is unreadable ({exc}); "
                                "GPUs in use not cross-checked")
            continue
        if usage.count is None:
            unreported.append(name)
            continue
        mine = held.get(name, {})
        leaving = ctx.completing.get(name, {})
        known = set(mine) | set(leaving)
        hint = ""
        if ctx.left_out.get(name):
            hint = (f"; running job(s) {', '.join(ctx.left_out[name])} left out of the snapshot "
                    "hold GPUs there")
        if usage.indices is not None:
            bad = sorted(g for g in usage.indices if g >= size)
            if bad:
                ctx.warnings.append(f"node {name}: gres_used {usage.text!r} names GPU(s) "
                                    f"{_idx(bad)} beyond its {size} GPUs; ignored")
            used = {g for g in usage.indices if g < size}
            if usage.count != len(usage.indices):
                ctx.warnings.append(f"node {name}: gres_used {usage.text!r} counts "
                                    f"{usage.count} GPU(s) in use but lists "
                                    f"{len(usage.indices)} indices; the indices count")
            phantom: dict[str, list[int]] = {}
            for g in sorted(set(mine) - used):
                phantom.setdefault(mine[g], []).append(g)
            for jid, gs in phantom.items():
                ctx.warnings.append(f"job {jid}: holds GPU(s) {_idx(gs)} of {name} by its "
                                    f"gres_detail, but the node's gres_used {usage.text!r} "
                                    "says they are free; kept as held")
            extra = sorted(used - known)
            if extra:
                _occupy(ctx, node, extra,
                        f"GPU(s) {_idx(extra)} of {name} are in use by the node's gres_used "
                        f"{usage.text!r} but held by no job in the snapshot{hint}")
            continue
        no_idx.append(name)
        missing = usage.count - len(known)
        if missing < 0:
            ctx.warnings.append(f"node {name}: the listed jobs hold {len(known)} GPU(s) but the "
                                f"node reports {usage.count} in use ({usage.text!r}); the "
                                "jobs' GPUs are kept as held")
        elif missing > 0:
            free = [g for g in range(size) if g not in known]
            chosen = free[:missing]
            _occupy(ctx, node, chosen,
                    f"{usage.count} GPU(s) of {name} are in use by {usage.text!r} but the "
                    f"snapshot's jobs hold {len(known)}{hint}; the report has no GPU indices "
                    f"(IDX), so GPU(s) {_idx(chosen)} stand for the {missing} unseen one(s) "
                    "(the count is right, which ones is a guess)")
            if len(chosen) < missing:
                ctx.warnings.append(f"node {name}: only {len(chosen)} GPU(s) left to mark "
                                    f"occupied for {missing} unseen in use")
    for why, names in ambiguous.items():
        ctx.warnings.append(
            f"GPUs in use on {len(names)} node(s) ({_short_list(names)}) not cross-checked: "
            f"{why} (read the nodes with `scontrol show nodes --json`, node_source: scontrol)")
    if no_idx:
        ctx.warnings.append(
            f"GPUs in use on {len(no_idx)} node(s) ({_short_list(no_idx)}) are reported without "
            "indices (IDX): only their number was cross-checked with the jobs' gres_detail "
            "(typed GRES with File= in gres.conf, or `scontrol show nodes --json`, give IDX)")
    if unreported:
        ctx.warnings.append(
            f"{len(unreported)} node(s) ({_short_list(unreported)}) report no GPUs in use "
            "(gres_used) at all: GPUs held by jobs the snapshot cannot see are not detected "
            "there")


def _idx(gpus: Iterable[int]) -> str:
    return ",".join(str(g) for g in gpus)


def _occupy(ctx: _Ctx, node: dict[str, Any], gpus: list[int], why: str) -> None:
    if not gpus:
        return
    jid = f"{OCCUPIED_PREFIX}{node['id']}"
    tier = ctx.cfg.tiers.unmanaged
    ctx.jobs.append({
        "id": jid, "tier": tier, "state": "running", "gpus_per_node": len(gpus), "nodes": 1,
        "topology": "any", "started_at": iso(ctx.now),
        "placement": [{"node": node["id"], "gpus": sorted(gpus)}],
        "checkpoint": {"signal": None},
        "_slurm": {"synthetic": True, "node": node["id"]},
    })
    ctx.unmanaged_used = True
    ctx.warnings.append(f"{jid}: {why} (another user's job, a hidden partition or a partial "
                        f"squeue?); they are occupied: tier {tier}, never planned onto nor "
                        "evicted")
