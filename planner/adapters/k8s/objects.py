"""Reading Kubernetes API objects (``kubectl get ... -o json``): quantities,
timestamps, a pod's GPU request, a node's state, and annotation values.

Plain dict access only: no Kubernetes client library is needed (or installed).
"""

from __future__ import annotations

import json
import math
import re
import signal as _signal
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from models.kinds import KUBECTL
from models.policy import MAX_SECONDS
from models.snapshot import EARLIEST, LATEST

_SIGNALS = {s.name for s in _signal.Signals}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX: dict[str, int | Decimal] = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "m": Decimal("0.001")}


_GET = KUBECTL
_OPTION = {"Node": "--nodes", "Pod": "--pods", "Event": "--events"}


# what to do with a document of another kind, given to this adapter
_USE = {"k8s-meta": "give it to 'k8s apply --snapshot-meta'",
        "k8s-snapshot": "plan it with 'preempt-planner plan FILE' (it is the output, not an input)",
        "plan": "give it to 'preempt-planner k8s apply PLAN'",
        "squeue": "read it with 'preempt-planner slurm snapshot'",
        "sacct": "read it with 'preempt-planner slurm snapshot'",
        "sinfo": "read it with 'preempt-planner slurm snapshot'",
        "nodes": "read it with 'preempt-planner slurm snapshot'",
        "snapshot": "plan it with 'preempt-planner plan FILE'",
        "policy": "give it to 'preempt-planner plan' with --policy FILE"}


def describe_document(doc: Any) -> tuple[str, str] | None:
    """What a document that is not a list of Kubernetes objects looks like, and what
    to do with it: ``(what, use)``, or None when it is not recognised (models.kinds
    recognises it)."""
    from models.kinds import recognise

    seen = recognise(doc)
    if seen is None or seen.name not in _USE:
        return None
    return seen.what, _USE[seen.name]


def what_is(doc: Any) -> str | None:
    """A short description of a document the adapter knows (kubectl lists included),
    for saying what a wrong file looks like; None when it is not recognised."""
    from models.kinds import recognise

    seen = recognise(doc)
    return seen.what if seen is not None else None


def _wrong_kind(kinds: dict[str, int], kind: str, source: str) -> str:
    option = _OPTION.get(kind, source)
    want = f"give the output of '{_GET[kind]}' as {option}" if kind in _GET else ""
    if len(kinds) > 1:
        listed = ", ".join(f"{k} ({n})" for k, n in sorted(kinds.items()))
        return (f"{option}: this looks like a list that mixes kinds {listed}; "
                f"{want} alone")
    (other,) = kinds
    if other in _GET:
        return (f"{option}: this looks like a{'n' if other[0] in 'AEIOU' else ''} {other} "
                f"list (the output of '{_GET[other]}'); use it as {_OPTION[other]}, and "
                f"{want}")
    return f"{option}: this looks like a list of {other} objects; {want}"


def items_of(doc: Any, kind: str, source: str) -> list[dict[str, Any]]:
    """The objects of a ``kubectl get <kind> -o json`` document: a ``List`` (or
    ``PodList``/``NodeList``) with ``items``, a bare list, or one object. The wrong
    kind of document (pods given as nodes, a snapshot, a plan, Slurm's JSON) is one
    InputError saying what it looks like and where it belongs."""
    from models import InputError

    option = _OPTION.get(kind, source)
    if isinstance(doc, list):
        objs = doc
    elif isinstance(doc, dict) and isinstance(doc.get("items"), list):
        objs = doc["items"]
        list_kind = doc.get("kind")
        if not objs and isinstance(list_kind, str) and list_kind.endswith("List") \
                and list_kind[:-4] in _GET and list_kind[:-4] != kind:
            raise InputError([_wrong_kind({list_kind[:-4]: 0}, kind, source)], source)
    elif isinstance(doc, dict) and doc.get("kind") == kind:
        objs = [doc]
    else:
        seen = describe_document(doc)
        if seen is None and isinstance(doc, dict) and isinstance(doc.get("kind"), str) \
                and isinstance(doc.get("metadata"), dict):
            seen = (f"one {doc['kind']} object", f"give the output of '{_GET[kind]}'"
                    if kind in _GET else "")
            if doc["kind"] in _GET:
                raise InputError([_wrong_kind({doc["kind"]: 1}, kind, source)], source)
        if seen is not None:
            raise InputError([f"{option}: this looks like {seen[0]}; {seen[1]}"
                              + (f"; {option} takes the output of '{_GET[kind]}'"
                                 if kind in _GET else "")], source)
        raise InputError([(f"{option}: expected the output of 'kubectl get {kind.lower()}s "
                           "-o json' (an object with an 'items' list)")], source)
    kinds: dict[str, int] = {}
    for obj in objs:
        k = obj.get("kind") if isinstance(obj, dict) else None
        if isinstance(k, str):
            kinds[k] = kinds.get(k, 0) + 1
    if set(kinds) - {kind}:
        raise InputError([_wrong_kind(kinds, kind, source)], source)
    errors = []
    out = []
    for i, obj in enumerate(objs):
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict) \
                or not obj["metadata"].get("name"):
            errors.append(f"items[{i}]: not a Kubernetes object with metadata.name")
            continue
        out.append(obj)
    if errors:
        raise InputError(errors, source)
    return out


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes resource quantity (``"8"``, ``8``, ``"1k"``) as a Decimal."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if not m or m.group(2) not in _SUFFIX:
        return None
    try:
        return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2)])
    except InvalidOperation:
        return None


def whole(value: Any) -> int | None:
    """A quantity that must be a whole number of devices (None if not)."""
    q = quantity(value)
    if q is None or q < 0 or q != q.to_integral_value():
        return None
    return int(q)


def _container_gpus(c: dict[str, Any], resource: str) -> int:
    res = c.get("resources") or {}
    # extended resources: a limit alone sets the request; both must be equal when given
    for part in ("limits", "requests"):
        v = (res.get(part) or {}).get(resource)
        if v is not None:
            n = whole(v)
            return n if n is not None else 0
    return 0


_MIG = re.compile(r"^mig-((?:[0-9]+c\.)?[0-9]+g\.[0-9]+gb(?:\+[a-z]+)?)$")


def mig_profile(resource: str, gpu_resource: str) -> str | None:
    """``nvidia.com/mig-1g.10gb`` -> ``1g.10gb`` (GPU Feature Discovery's MIG "mixed"
    strategy: one extended resource per MIG profile, in the domain of the GPU
    resource); None for anything else (``nvidia.com/mig-1g.10gb.shared`` counts
    time-slicing replicas, not devices)."""
    domain, sep, name = resource.partition("/")
    if not sep or domain != gpu_resource.partition("/")[0]:
        return None
    m = _MIG.match(name)
    return m.group(1) if m else None


def mig_type(profile: str) -> str:
    """The contract ``gpu_type`` of a MIG profile, before ``gpu_types`` renames it."""
    return f"MIG-{profile}"


def pod_gpu_resources(pod: dict[str, Any], gpu_resource: str, mig: bool) -> dict[str, int]:
    """The GPU resources a pod requests, each counted as the scheduler counts it
    (``pod_gpus``): the GPU resource and, with ``mig``, every MIG profile resource.
    Resources requested 0 times are left out."""
    spec = pod.get("spec") or {}
    names = {gpu_resource}
    if mig:
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            res = c.get("resources") or {}
            for part in ("limits", "requests"):
                names.update(k for k in (res.get(part) or {})
                             if isinstance(k, str) and mig_profile(k, gpu_resource))
    counts = {r: pod_gpus(pod, r) for r in sorted(names)}
    return {r: n for r, n in counts.items() if n > 0}


def pod_gpus(pod: dict[str, Any], resource: str) -> int:
    """Effective GPU request of a pod, as the scheduler computes it: the sum over
    app containers plus restartable init containers (sidecars), or the largest
    plain init container (plus the sidecars started before it), whichever is larger."""
    spec = pod.get("spec") or {}
    app = sum(_container_gpus(c, resource) for c in spec.get("containers") or [])
    sidecars = 0
    init_peak = 0
    for c in spec.get("initContainers") or []:
        n = _container_gpus(c, resource)
        if c.get("restartPolicy") == "Always":
            sidecars += n
        else:
            init_peak = max(init_peak, sidecars + n)
    return max(app + sidecars, init_peak)




def _any_time(value: Any) -> datetime | None:
    """A timestamp or Unix seconds, whatever its year; None if not one (or beyond
    what ``datetime`` holds: ``1e20``, ``inf``)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(value, UTC) if math.isfinite(value) else None
        if not isinstance(value, str) or not value.strip():
            return None
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            pass
        else:
            return datetime.fromtimestamp(seconds, UTC) if math.isfinite(seconds) else None
        dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except (ValueError, OverflowError, OSError):
        return None
    return dt if dt.tzinfo is not None else None


def time_out_of_range(value: Any) -> bool:
    """Whether ``value`` has the form of a time (RFC 3339 with a zone, or a number of
    Unix seconds) but is outside the contract's 1970-01-01 to 9000-01-01 (``1e20``,
    ``inf`` and ``0001-01-01T00:00:00Z`` are; ``yesterday`` is not a time at all)."""
    if isinstance(value, bool):
        return False
    t = _any_time(value)
    if t is not None:
        return not EARLIEST <= t < LATEST
    try:
        seconds = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        return False
    return not math.isnan(seconds)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp (``2026-11-29T08:00:00Z``) or Unix seconds from
    1970-01-01 up to 9000-01-01 (the contract's range); None if invalid or outside."""
    t = _any_time(value)
    return t if t is not None and EARLIEST <= t < LATEST else None


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_number(value: str) -> float | None:
    """A number from 0 to 10^9 (the contract's limits for durations and sizes)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and 0 <= x <= MAX_SECONDS else None


def parse_int(value: str) -> int | None:
    try:
        x = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return x if x >= 0 else None


def parse_bool(value: str) -> bool | None:
    v = str(value).strip().lower()
    if v in ("true", "yes", "1", "on"):
        return True
    if v in ("false", "no", "0", "off"):
        return False
    return None


def parse_signal(value: Any) -> tuple[bool, str | None]:
    """(ok, signal): ``"SIGUSR1"``, ``"usr1"`` -> SIGUSR1; ``"none"``/``"null"`` -> None."""
    if value is None:
        return True, None
    v = str(value).strip().upper()
    if v in ("", "NONE", "NULL"):
        return True, None
    if not v.startswith("SIG"):
        v = "SIG" + v
    return (True, v) if v in _SIGNALS else (False, None)


def parse_gpu_ids(value: str) -> list[int] | None:
    """``"0,1,2,3"`` (also blanks or a JSON list) -> [0, 1, 2, 3]; None if not indices."""
    text = str(value).strip()
    try:
        parsed = json.loads(text) if text.startswith("[") else None
    except json.JSONDecodeError:
        return None
    parts = parsed if isinstance(parsed, list) else re.split(r"[,\s]+", text)
    out = []
    for p in parts:
        if p == "":
            continue
        n = p if isinstance(p, int) and not isinstance(p, bool) else parse_int(str(p))
        if n is None:
            return None
        out.append(n)
    return out or None


def parse_nvlink(value: str) -> Any:
    """A node's NVLink layout from a label or annotation value: ``nvswitch``,
    ``none``, ``islands-N`` (consecutive islands of N GPUs, filled in later), or
    JSON (a list of islands or ``{"edges": [...]}``). None if unreadable."""
    text = str(value).strip()
    if text in ("nvswitch", "none"):
        return text
    m = re.fullmatch(r"islands-(\d+)", text)
    if m and int(m.group(1)) >= 1:
        return ("islands", int(m.group(1)))
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, (list, dict)) else None


def single_mig_profile(product: str | None) -> str | None:
    """``A100-SXM4-40GB-MIG-1g.5gb`` -> ``1g.5gb``: the product label of a node whose
    ``nvidia.com/gpu`` devices are MIG slices (GFD's MIG "single" strategy)."""
    if not product:
        return None
    m = re.search(r"-MIG-(.+)$", product, flags=re.IGNORECASE)
    return m.group(1) if m else None


def islands(gpus: int, size: int) -> list[list[int]]:
    return [list(range(s, min(s + size, gpus))) for s in range(0, gpus, size)]


def node_ready(node: dict[str, Any]) -> bool:
    """The node's ``Ready`` condition is ``True`` (missing = not ready)."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that orders ``worker-2`` before ``worker-10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


# Kubernetes object names (the API server enforces them): a namespace is a DNS label,
# a pod name a DNS subdomain. Names outside these come from a hand-edited file.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                            r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# A group name the adapter uses in a job id: what Volcano, Kueue, the coscheduling
# plugin and KAI accept (object names and label values), nothing that could end a
# line, quote a word, or mean something in a job id ('/', ':', '+', '@')
GROUP_NAME_RULE = "[A-Za-z0-9][A-Za-z0-9._-]{0,252}"
GROUP_NAME = re.compile(GROUP_NAME_RULE)


def valid_namespace(name: Any) -> bool:
    return isinstance(name, str) and _DNS_LABEL.fullmatch(name) is not None


def valid_pod_name(name: Any) -> bool:
    return isinstance(name, str) and _DNS_SUBDOMAIN.fullmatch(name) is not None


def valid_group_name(name: Any) -> bool:
    return isinstance(name, str) and GROUP_NAME.fullmatch(name) is not None


def shown(text: str, limit: int = 80) -> str:
    """A value from an object, quoted for a message on one line: control characters
    escaped (``repr``), at most ``limit`` characters of it."""
    return repr(text[:limit] + ("..." if len(text) > limit else ""))
