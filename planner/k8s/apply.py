"""Turn a plan back into Kubernetes API objects: ``policy/v1`` Evictions for every
pod of every victim and ``v1`` Bindings for every pod of every placed job, or
the equivalent ``kubectl`` commands.

Job ids map back to pods through the ``_k8s`` section that ``k8s snapshot``
writes into the snapshot (or a separate meta file). Without it, an id
``<namespace>/<pod>`` is taken as that one pod; group ids need the meta.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from typing import Any

from models import InputError, Plan
from planner.k8s.config import PREFIX
from planner.k8s.snapshot import META_KIND

_WAIT_MARGIN_S = 60


@dataclass(frozen=True)
class JobPods:
    namespace: str
    pods: tuple[str, ...]


def read_meta(doc: Any, source: str | None = None) -> dict[str, Any]:
    """The pod mapping from a snapshot written by ``k8s snapshot`` (its ``_k8s``
    section) or from a standalone meta document."""
    if isinstance(doc, dict) and isinstance(doc.get("_k8s"), dict):
        doc = doc["_k8s"]
    if not isinstance(doc, dict) or doc.get("kind") != META_KIND \
            or not isinstance(doc.get("jobs"), dict):
        raise InputError([("not a snapshot written by 'preempt-planner k8s snapshot' (no _k8s "
                          f"section) nor a {META_KIND} document")], source)
    return doc


def grace_seconds(grace_s: float) -> int:
    """``deleteOptions.gracePeriodSeconds``: the plan's grace rounded up to whole
    seconds, at least 1 (the API reads 0 as 'delete immediately', without SIGTERM)."""
    return max(1, math.ceil(round(grace_s, 6)))


def job_pods(job_id: str, meta: dict[str, Any] | None) -> JobPods:
    entry = (meta or {}).get("jobs", {}).get(job_id)
    if entry is not None:
        return JobPods(entry["namespace"], tuple(entry["pods"]))
    ns, sep, name = job_id.partition("/")
    if sep and ns and name and not any(c in name for c in "/:+"):
        return JobPods(ns, (name,))
    hint = "" if meta else " (pass --snapshot-meta with the snapshot written by 'k8s snapshot')"
    raise InputError([f"job {job_id!r}: cannot map it to pods{hint}"])


def eviction_objects(plan: Plan, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One Eviction per pod of each victim, grace = the victim's ``grace_s`` rounded up."""
    out = []
    errors = []
    for ev in plan.evictions:
        try:
            jp = job_pods(ev.job, meta)
        except InputError as exc:
            errors += exc.errors
            continue
        for pod in jp.pods:
            out.append({
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod, "namespace": jp.namespace},
                "deleteOptions": {"gracePeriodSeconds": grace_seconds(ev.grace_s)},
            })
    if errors:
        raise InputError(errors, "plan")
    return out


EVENT_REASON = "PreemptPlannerEviction"  # what 'k8s snapshot --events' reads back (R15)


def event_objects(plan: Plan, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One ``v1`` Event per pod of each victim, reason EVENT_REASON at the plan's time:
    the record of the eviction that the next snapshot's ``recent_evictions`` reads
    (``k8s snapshot --events``), for the rolling eviction budget (R15)."""
    now = plan.model_dump(mode="json")["now"]
    stamp = int(plan.now.timestamp())
    out = []
    for ev in plan.evictions:
        jp = job_pods(ev.job, meta)
        for pod in jp.pods:
            out.append({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{pod}.preempt-planner-{stamp}"[:253],
                             "namespace": jp.namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod,
                                   "namespace": jp.namespace},
                "reason": EVENT_REASON, "type": "Normal", "count": 1,
                "message": (f"evicted by preempt-planner (job {ev.job}, tier {ev.tier}, grace "
                            f"{grace_seconds(ev.grace_s)} s) for "
                            f"{', '.join(ev.preemptors) or 'no placed job'}"),
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": "preempt-planner"},
                "reportingComponent": "preempt-planner", "reportingInstance": "preempt-planner",
            })
    return out


def _placed_pods(plan: Plan, meta: dict[str, Any] | None) -> list[tuple[Any, JobPods]]:
    out = []
    errors = []
    for pl in plan.placements:
        try:
            jp = job_pods(pl.job, meta)
        except InputError as exc:
            errors += exc.errors
            continue
        if len(jp.pods) != len(pl.placement):
            errors.append(f"job {pl.job!r}: {len(jp.pods)} pod(s) but the plan places it on "
                          f"{len(pl.placement)} node(s)")
            continue
        out.append((pl, jp))
    if errors:
        raise InputError(errors, "plan")
    return out


def binding_objects(plan: Plan, meta: dict[str, Any] | None = None,
                    prefix: str | None = None) -> list[dict[str, Any]]:
    """One Binding per pod of each placed job: the i-th pod (natural name order) goes
    to the i-th node of the placement. The planned GPU indices and the wait travel
    as annotations, which the API server copies onto the pod when it binds it."""
    prefix = prefix or (meta or {}).get("prefix") or PREFIX
    out = []
    for pl, jp in _placed_pods(plan, meta):
        for pod, part in zip(jp.pods, pl.placement, strict=True):
            out.append({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": pod, "namespace": jp.namespace, "annotations": {
                    prefix + "gpu-ids": ",".join(str(g) for g in part.gpus),
                    prefix + "start-after-s": str(grace_seconds(pl.start_after_s)
                                                  if pl.start_after_s > 0 else 0),
                }},
                "target": {"apiVersion": "v1", "kind": "Node", "name": part.node},
            })
    return out


def object_list(plan: Plan, meta: dict[str, Any] | None = None,
                bindings: bool = True) -> dict[str, Any]:
    """A ``v1`` List: the Evictions first, then the Bindings."""
    items = eviction_objects(plan, meta)
    if bindings:
        items += binding_objects(plan, meta)
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


def _post(path: str, obj: dict[str, Any]) -> list[str]:
    body = json.dumps(obj, separators=(",", ":"), sort_keys=False)
    return [f"kubectl create --raw {shlex.quote(path)} -f - <<'EOF'", body, "EOF"]


def kubectl_script(plan: Plan, meta: dict[str, Any] | None = None,
                   bindings: bool = True) -> str:
    """A POSIX shell script: evictions through the Eviction API (PodDisruptionBudgets
    apply; a refusal stops the script), then, per placed job, a wait for its
    victims' pods to be gone and the bindings."""
    evictions = eviction_objects(plan, meta)
    events = iter(event_objects(plan, meta))
    by_job = {ev.job: ev for ev in plan.evictions}
    lines = [
        "#!/bin/sh",
        (f"# preempt-planner k8s apply: plan for {plan.model_dump(mode='json')['now']} "
        f"(status {plan.status}): {len(plan.evictions)} eviction(s), "
        f"{len(plan.placements)} placement(s)"),
        "set -eu",
    ]
    k = 0
    for ev in plan.evictions:
        jp = job_pods(ev.job, meta)
        lines += ["", (f"# evict {ev.job} (tier {ev.tier}, grace {ev.grace_s:g} s) for "
                      f"{', '.join(ev.preemptors) or '-'}")]
        for pod in jp.pods:
            obj = evictions[k]
            k += 1
            lines += _post(f"/api/v1/namespaces/{jp.namespace}/pods/{pod}/eviction", obj)
        lines.append("# the record 'k8s snapshot --events' reads back (rolling budget, R15)")
        for _pod in jp.pods:
            body = json.dumps(next(events), separators=(",", ":"))
            lines += ["kubectl create -f - <<'EOF'", body, "EOF"]
    if bindings:
        objs = iter(binding_objects(plan, meta))
        for pl, jp in _placed_pods(plan, meta):
            lines += ["", f"# place {pl.job} on {', '.join(p.node for p in pl.placement)}"]
            victims = [ev for ev in plan.evictions if pl.job in ev.preemptors]
            if victims:
                timeout = max(grace_seconds(by_job[v.job].grace_s) for v in victims)
                timeout += _WAIT_MARGIN_S
                for v in victims:
                    vp = job_pods(v.job, meta)
                    names = " ".join(shlex.quote(f"pod/{n}") for n in vp.pods)
                    lines.append(f"kubectl wait --for=delete {names} -n "
                                 f"{shlex.quote(vp.namespace)} --timeout={timeout}s")
            for pod in jp.pods:
                lines += _post(f"/api/v1/namespaces/{jp.namespace}/pods/{pod}/binding",
                               next(objs))
    return "\n".join(lines) + "\n"
