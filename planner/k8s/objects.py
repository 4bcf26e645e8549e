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

from models.policy import MAX_SECONDS

_SIGNALS = {s.name for s in _signal.Signals}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX: dict[str, int | Decimal] = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "m": Decimal("0.001")}


def items_of(doc: Any, kind: str, source: str) -> list[dict[str, Any]]:
    """The objects of a ``kubectl get <kind> -o json`` document: a ``List`` (or
    ``PodList``/``NodeList``) with ``items``, a bare list, or one object."""
    from models import InputError

    if isinstance(doc, list):
        objs = doc
    elif isinstance(doc, dict) and isinstance(doc.get("items"), list):
        objs = doc["items"]
    elif isinstance(doc, dict) and doc.get("kind") == kind:
        objs = [doc]
    else:
        raise InputError([(f"expected the output of 'kubectl get {kind.lower()}s -o json' "
                          "(an object with an 'items' list)")], source)
    errors = []
    out = []
    for i, obj in enumerate(objs):
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict) \
                or not obj["metadata"].get("name"):
            errors.append(f"items[{i}]: not a Kubernetes object with metadata.name")
            continue
        if obj.get("kind", kind) != kind:
            errors.append(f"items[{i}]: kind {obj.get('kind')!r}, expected {kind}")
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


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp (``2026-11-29T08:00:00Z``) or Unix seconds; None if invalid."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, UTC) if math.isfinite(value) else None
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo is not None else None


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
