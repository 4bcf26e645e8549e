"""Build a contract snapshot (format v1) from ``kubectl get nodes -o json`` and
``kubectl get pods -A -o json``.

Job ids: a lone pod is ``<namespace>/<pod>``; a pod group (gang) is
``<namespace>/group:<group>``, and the pending rest of a partly running group is
``<namespace>/group:<group>+pending``. Pod names never contain ``:`` or ``+``,
so the forms cannot collide. The snapshot carries, under the comment key
``_k8s`` (ignored by the loader), the pods of every job, which is what
``k8s apply`` needs to turn a plan back into API objects.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from models import SHAPE_ERRORS, InputError, load_snapshot
from models.policy import MAX_GB_PER_S, MAX_PRIORITY, MIN_GB_PER_S
from models.snapshot import NvlinkEdges
from planner.k8s.config import K8sConfig
from planner.k8s.objects import (
    islands,
    iso,
    natural_key,
    node_ready,
    parse_bool,
    parse_gpu_ids,
    parse_int,
    parse_number,
    parse_nvlink,
    parse_signal,
    parse_time,
    pod_gpus,
    whole,
)

META_KIND = "preempt-planner/k8s-meta"


@dataclass
class Pod:
    """The fields of one GPU pod that the adapter uses."""

    namespace: str
    name: str
    gpus: int
    node: str | None
    running: bool
    annotations: dict[str, str]
    labels: dict[str, str]
    priority_class: str | None
    created_at: datetime | None
    started_at: datetime | None
    spec: dict[str, Any]
    group: str | None = None
    gpu_ids: list[int] = field(default_factory=list)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def sort_key(self) -> tuple[Any, ...]:
        return (natural_key(self.name), self.namespace)


@dataclass
class K8sSnapshot:
    """The contract snapshot (a dict ready for JSON), the pod mapping and warnings."""

    snapshot: dict[str, Any]
    meta: dict[str, Any]
    warnings: list[str]


def _nvlink_json(spec: Any) -> Any:
    if isinstance(spec, NvlinkEdges):
        return {"edges": [list(e) for e in spec.edges]}
    return spec


class _Builder:
    def __init__(self, cfg: K8sConfig, now: datetime):
        self.cfg = cfg
        self.now = now
        self.warnings: list[str] = []

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    # ------------------------------------------------------------------ nodes
    def node(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        cfg = self.cfg
        meta = obj["metadata"]
        name = meta["name"]
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        status = obj.get("status") or {}
        raw = (status.get("allocatable") or {}).get(cfg.gpu_resource)
        if raw is None:
            raw = (status.get("capacity") or {}).get(cfg.gpu_resource)
        if raw is None:
            return None  # not a GPU node
        gpus = whole(raw)
        if gpus is None or gpus < 1 or gpus > 1024:
            self.warn(f"node {name}: {cfg.gpu_resource} allocatable {raw!r} is not 1..1024 "
                      "whole GPUs; node skipped")
            return None
        product = labels.get(cfg.gpu_product_label)
        rec: dict[str, Any] = {"id": name, "gpus": gpus}
        if product:
            rec["gpu_type"] = cfg.gpu_types.get(product, product)
        rec["nvlink"] = self._nvlink(name, gpus, product, labels, annotations)
        pool = labels.get(cfg.pool_label) if cfg.pool_label else None
        rec["pool"] = pool or cfg.default_pool
        block = next((labels[k] for k in cfg.block_labels if labels.get(k)), None)
        if block:
            rec["block"] = block
        domain = labels.get(cfg.nvlink_domain_label) if cfg.nvlink_domain_label else None
        if domain:
            rec["nvlink_domain"] = domain
        storage = (labels.get(cfg.storage_label) if cfg.storage_label else None) \
            or cfg.default_storage
        if storage:
            rec["storage"] = storage
        local = cfg.local_write_gb_per_s
        text = annotations.get(cfg.key("local-write-gb-per-s"))
        if text is not None:
            v = parse_number(text)
            if v is None or not MIN_GB_PER_S <= v <= MAX_GB_PER_S:
                self.warn(f"node {name}: annotation {cfg.key('local-write-gb-per-s')}={text!r} "
                          f"is not a number from {MIN_GB_PER_S:g} to {MAX_GB_PER_S:g}; ignored")
            else:
                local = v
        if local is not None:
            rec["local_write_gb_per_s"] = local
        rec["state"] = self._node_state(obj)
        return rec

    def _node_state(self, obj: dict[str, Any]) -> str:
        if not node_ready(obj):
            return "down"
        spec = obj.get("spec") or {}
        if spec.get("unschedulable"):
            return "drain"
        for t in spec.get("taints") or []:
            if t.get("key") in self.cfg.drain_taints and t.get("effect") in ("NoSchedule",
                                                                            "NoExecute"):
                return "drain"
        return "up"

    def _nvlink(self, name: str, gpus: int, product: str | None, labels: dict[str, str],
                annotations: dict[str, str]) -> Any:
        cfg = self.cfg
        key = cfg.key("nvlink")
        text = annotations.get(key, labels.get(key))
        if text is not None:
            spec = parse_nvlink(text)
            if isinstance(spec, tuple):
                return islands(gpus, spec[1])
            if spec is not None:
                return spec
            self.warn(f"node {name}: {key}={text!r} is not nvswitch, none, islands-N or "
                      "JSON; using the configured layout")
        if name in cfg.nvlink_by_node:
            return _nvlink_json(cfg.nvlink_by_node[name])
        if product and product in cfg.nvlink_by_product:
            return _nvlink_json(cfg.nvlink_by_product[product])
        return _nvlink_json(cfg.default_nvlink)

    # ------------------------------------------------------------------- pods
    def pod(self, obj: dict[str, Any]) -> Pod | None:
        cfg = self.cfg
        meta = obj["metadata"]
        ns = meta.get("namespace") or "default"
        name = meta["name"]
        if cfg.namespaces is not None and ns not in cfg.namespaces:
            return None
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        phase = status.get("phase") or "Pending"
        if phase in ("Succeeded", "Failed"):
            return None  # completed pods hold nothing
        gpus = pod_gpus(obj, cfg.gpu_resource)
        if gpus <= 0:
            return None
        node = spec.get("nodeName") or None
        if node is None and phase != "Pending":
            return None
        if node is None and spec.get("schedulingGates") and not cfg.include_gated:
            self.warn(f"pod {ns}/{name}: has scheduling gates (not yet admitted); skipped")
            return None
        return Pod(namespace=ns, name=name, gpus=gpus, node=node, running=node is not None,
                   annotations=dict(meta.get("annotations") or {}),
                   labels=dict(meta.get("labels") or {}),
                   priority_class=spec.get("priorityClassName"),
                   created_at=parse_time(meta.get("creationTimestamp")),
                   started_at=parse_time(status.get("startTime")), spec=spec)

    def assign_gpus(self, nodes: dict[str, dict[str, Any]], pods: list[Pod]) -> list[Pod]:
        """GPU indices of running pods: an index annotation when valid, else the lowest
        free indices, node by node, pods in name order. Pods that do not fit are dropped."""
        by_node: dict[str, list[Pod]] = defaultdict(list)
        kept = []
        for p in pods:
            if not p.running:
                kept.append(p)
            elif p.node not in nodes:
                self.warn(f"pod {p.ref}: runs on node {p.node}, which is not in the snapshot "
                          "(no GPUs, or skipped); ignored")
            else:
                by_node[p.node].append(p)
        for node_id in sorted(by_node):
            size = nodes[node_id]["gpus"]
            used: set[int] = set()
            rest = []
            for p in sorted(by_node[node_id], key=Pod.sort_key):
                ids = self._annotated_ids(p, size, used)
                if ids is None:
                    rest.append(p)
                else:
                    p.gpu_ids = ids
                    used.update(ids)
                    kept.append(p)
            for p in rest:
                free = [g for g in range(size) if g not in used]
                if len(free) < p.gpus:
                    self.warn(f"pod {p.ref}: needs {p.gpus} GPUs but node {node_id} has only "
                              f"{len(free)} left of {size} allocatable; ignored")
                    continue
                p.gpu_ids = free[: p.gpus]
                used.update(p.gpu_ids)
                kept.append(p)
        return kept

    def _annotated_ids(self, p: Pod, size: int, used: set[int]) -> list[int] | None:
        for key in self.cfg.gpu_ids_annotations:
            text = p.annotations.get(key)
            if text is None:
                continue
            ids = parse_gpu_ids(text)
            problem = None
            if ids is None:
                problem = "is not a list of GPU indices"
            elif len(ids) != p.gpus or len(set(ids)) != len(ids):
                problem = f"does not name {p.gpus} distinct GPUs"
            elif any(g >= size for g in ids):
                problem = f"names a GPU beyond the node's {size}"
            elif used.intersection(ids):
                problem = "names GPUs already taken by another pod"
            if problem is None:
                return ids
            self.warn(f"pod {p.ref}: annotation {key}={text!r} {problem}; indices assigned "
                      "by name order instead")
            return None
        return None

    def group_of(self, p: Pod) -> str | None:
        for gk in self.cfg.group_keys:
            value = gk.read({"annotations": p.annotations, "labels": p.labels})
            if value:
                return value
        return None

    # ------------------------------------------------------------ annotations
    def _ann(self, pods: list[Pod], key: str) -> tuple[Pod, str] | None:
        """The first pod (name order) that has annotation ``prefix+key``."""
        full = self.cfg.key(key)
        for p in pods:
            if full in p.annotations:
                return p, p.annotations[full]
        return None

    def _number(self, pods: list[Pod], key: str, kind: str = "float") -> Any:
        found = self._ann(pods, key)
        if found is None:
            return None
        p, text = found
        v = parse_int(text) if kind == "int" else parse_number(text)
        if v is None:
            what = "a whole number >= 0" if kind == "int" else "a number from 0 to 1e+09"
            self.warn(f"pod {p.ref}: annotation {self.cfg.key(key)}={text!r} is not {what}; "
                      "ignored")
        return v

    def _time(self, pods: list[Pod], key: str) -> datetime | None:
        found = self._ann(pods, key)
        if found is None:
            return None
        p, text = found
        t = parse_time(text)
        if t is None:
            self.warn(f"pod {p.ref}: annotation {self.cfg.key(key)}={text!r} is not an "
                      "ISO-8601 time with a zone or Unix seconds; ignored")
            return None
        return self._not_after_now(t, f"pod {p.ref}: annotation {self.cfg.key(key)}")

    def _not_after_now(self, t: datetime, what: str) -> datetime:
        if t > self.now:
            self.warn(f"{what}: {iso(t)} is after now ({iso(self.now)}); using now")
            return self.now
        return t

    def _sidecar(self, pods: list[Pod]) -> dict[str, Any]:
        """Checkpoint fields from the trap's sidecar JSON, copied by the job into the
        ``checkpoint`` annotation of each writing pod: sizes add up over the pods,
        ``last_at`` is the oldest, times are the largest, the signal the first."""
        key = self.cfg.key("checkpoint")
        out: dict[str, Any] = {}
        sizes: list[float] = []
        lasts: list[datetime] = []
        for p in pods:
            text = p.annotations.get(key)
            if text is None:
                continue
            try:
                doc = json.loads(text)
            except json.JSONDecodeError:
                doc = None
            if not isinstance(doc, dict):
                self.warn(f"pod {p.ref}: annotation {key} is not a JSON object; ignored")
                continue
            for fld in ("barrier_s", "cleanup_s", "restore_s", "size_gb"):
                if fld in doc:
                    v = doc[fld]
                    if isinstance(v, bool) or not isinstance(v, (int, float)) \
                            or not math.isfinite(v) or v < 0:
                        self.warn(f"pod {p.ref}: annotation {key}: {fld}={v!r} is not a "
                                  "number >= 0; ignored")
                    elif fld == "size_gb":
                        sizes.append(float(v))
                    else:
                        out[fld] = max(out.get(fld, 0.0), float(v))
            if "last_at" in doc:
                t = parse_time(doc["last_at"])
                if t is None:
                    self.warn(f"pod {p.ref}: annotation {key}: last_at={doc['last_at']!r} is "
                              "not a time; ignored")
                else:
                    lasts.append(t)
            if "signal" in doc and "signal" not in out:
                ok, sig = parse_signal(doc["signal"])
                if ok:
                    out["signal"] = sig
                else:
                    self.warn(f"pod {p.ref}: annotation {key}: unknown signal "
                              f"{doc['signal']!r}; ignored")
        if sizes:
            out["size_gb"] = sum(sizes)
        if lasts:
            out["last_at"] = self._not_after_now(min(lasts), f"annotation {key} last_at")
        return out

    def checkpoint(self, pods: list[Pod]) -> dict[str, Any]:
        ck: dict[str, Any] = {}
        for key, fld in (("checkpoint-size-gb", "size_gb"), ("barrier-s", "barrier_s"),
                         ("cleanup-s", "cleanup_s"), ("restore-s", "restore_s")):
            v = self._number(pods, key)
            if v is not None:
                ck[fld] = v
        found = self._ann(pods, "signal")
        if found is not None:
            ok, sig = parse_signal(found[1])
            if ok:
                ck["signal"] = sig
            else:
                self.warn(f"pod {found[0].ref}: annotation {self.cfg.key('signal')}="
                          f"{found[1]!r} is not a signal name (e.g. SIGTERM, SIGUSR1, none); "
                          "ignored")
        last = self._time(pods, "last-checkpoint-at")
        if last is not None:
            ck["last_at"] = last
        ck.update(self._sidecar(pods))  # measured at run time: wins over static values
        if "last_at" in ck:
            ck["last_at"] = iso(ck["last_at"])
        return ck

    # ------------------------------------------------------------------- jobs
    def job(self, job_id: str, pods: list[Pod], group: str | None) -> dict[str, Any] | None:
        """One contract job from pods that are all running or all pending."""
        cfg = self.cfg
        first = pods[0]
        running = first.running
        tier, prio = cfg.tier_of_class(first.priority_class)
        classes = {p.priority_class for p in pods}
        if len(classes) > 1:
            self.warn(f"job {job_id}: pods have different priority classes "
                      f"{sorted(c or '' for c in classes)}; using {first.priority_class!r} "
                      f"of {first.name}")
        t = self._number(pods, "tier", "int")
        if t is not None:
            tier = t
        p2 = self._ann(pods, "priority")
        if p2 is not None:
            try:
                prio = int(p2[1])
                if abs(prio) > MAX_PRIORITY:
                    raise ValueError
            except ValueError:
                prio = cfg.tier_of_class(first.priority_class)[1]
                self.warn(f"pod {p2[0].ref}: annotation {cfg.key('priority')}={p2[1]!r} is not "
                          f"an integer within +-{MAX_PRIORITY:g}; ignored")
        team = first.labels.get(cfg.team_label) if cfg.team_label else None
        rec: dict[str, Any] = {"id": job_id, "tier": tier, "priority": prio,
                               "team": team or first.namespace,
                               "state": "running" if running else "pending"}
        gpu_type = self._gpu_type(pods)
        topology: str = cfg.default_topology
        found = self._ann(pods, "topology")
        if found is not None:
            if found[1] in ("nvlink", "any"):
                topology = found[1]
            else:
                self.warn(f"pod {found[0].ref}: annotation {cfg.key('topology')}={found[1]!r} "
                          "is not nvlink or any; ignored")
        flags = {}
        for key, fld in (("same-block", "same_block"), ("same-nvlink-domain",
                                                        "same_nvlink_domain")):
            found = self._ann(pods, key)
            if found is not None:
                b = parse_bool(found[1])
                if b is None:
                    self.warn(f"pod {found[0].ref}: annotation {cfg.key(key)}={found[1]!r} is "
                              "not true/false; ignored")
                else:
                    flags[fld] = b
        if running:
            placement = self._running_placement(job_id, pods)
            if placement is None:
                return None
            gpn = len(placement[0]["gpus"])
            rec.update(gpus_per_node=gpn, nodes=len(placement))
            starts = [p.started_at or p.created_at for p in pods]
            start = max((s for s in starts if s is not None), default=self.now)
            rec["started_at"] = iso(self._not_after_now(start, f"job {job_id}: startTime"))
            rec["placement"] = placement
            ends = self._deadline(pods)
            if ends is not None:
                rec["expected_end_at"] = iso(ends)
        else:
            counts = sorted({p.gpus for p in pods})
            if len(counts) > 1:
                self.warn(f"job {job_id}: pending pods request different GPU counts {counts}; "
                          f"planned as {len(pods)} nodes x {counts[-1]} GPUs (the largest)")
            rec.update(gpus_per_node=counts[-1], nodes=len(pods))
            created = [p.created_at for p in pods if p.created_at is not None]
            if created:
                rec["submitted_at"] = iso(min(created))
        if gpu_type:
            rec["gpu_type"] = gpu_type
        rec["topology"] = topology
        rec.update(flags)
        rec["checkpoint"] = self.checkpoint(pods)
        pre = [v for v in (self._number([p], "preemptions", "int") for p in pods)
               if v is not None]
        if pre:
            rec["preemptions"] = max(pre)
        lasts = [t for t in (self._time([p], "last-preempted-at") for p in pods) if t]
        if lasts:
            rec["last_preempted_at"] = iso(max(lasts))
        return rec

    @staticmethod
    def _deadline(pods: list[Pod]) -> datetime | None:
        """R17: the earliest ``startTime + activeDeadlineSeconds`` of the pods (the
        kubelet kills a pod at its deadline, and a gang with it); None when a pod has
        no deadline. An annotation is no source: its owner could claim any end."""
        ends = []
        for p in pods:
            limit = p.spec.get("activeDeadlineSeconds")
            if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0 \
                    or p.started_at is None:
                return None
            ends.append(p.started_at + timedelta(seconds=limit))
        return min(ends) if ends else None

    def _running_placement(self, job_id: str, pods: list[Pod]) -> list[dict[str, Any]] | None:
        by_node: dict[str, list[int]] = defaultdict(list)
        order: list[str] = []
        for p in pods:
            if p.node not in by_node:
                order.append(p.node or "")
            by_node[p.node or ""].extend(p.gpu_ids)
        sizes = {len(v) for v in by_node.values()}
        if len(sizes) != 1:
            return None  # caller splits the group
        return [{"node": n, "gpus": sorted(by_node[n])} for n in order]

    def _gpu_type(self, pods: list[Pod]) -> str | None:
        cfg = self.cfg
        found = self._ann(pods, "gpu-type")
        if found is not None and found[1]:
            return found[1]
        label = cfg.gpu_product_label
        for p in pods:
            value = (p.spec.get("nodeSelector") or {}).get(label)
            if value:
                return cfg.gpu_types.get(value, value)
            req = (((p.spec.get("affinity") or {}).get("nodeAffinity") or {})
                   .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
            terms = req.get("nodeSelectorTerms") or []
            values: set[str] = set()
            for term in terms:
                hit = [e for e in term.get("matchExpressions") or []
                       if e.get("key") == label and e.get("operator") == "In"]
                if len(hit) != 1 or len(hit[0].get("values") or []) != 1:
                    values = set()
                    break
                values.add(hit[0]["values"][0])
            if len(values) == 1:
                v = values.pop()
                return cfg.gpu_types.get(v, v)
        return None


def _shape_error(source: str, where: str, exc: Exception) -> InputError:
    what = ("the output of 'kubectl get nodes -o json'" if source == "nodes" else
            "the output of 'kubectl get pods -A -o json'" if source == "pods" else
            "the outputs of 'kubectl get nodes -o json' and 'kubectl get pods -A -o json'")
    return InputError([(f"{where}a field has a value of the wrong type or range "
                       f"({type(exc).__name__}: {exc}); give {what} unchanged")], source)


def _each(objs: list[dict[str, Any]], convert: Any, source: str) -> list[Any]:
    """``convert`` applied to each object; a shape error names the object."""
    out = []
    for i, obj in enumerate(objs):
        try:
            out.append(convert(obj))
        except InputError:
            raise
        except SHAPE_ERRORS as exc:
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            named = f" ({name})" if isinstance(name, str) else ""
            raise _shape_error(source, f"items[{i}]{named}: ", exc) from None
    return out


def build_snapshot(nodes_doc: Any, pods_doc: Any, config: K8sConfig | None = None,
                   now: datetime | None = None, events_doc: Any = None) -> K8sSnapshot:
    """Convert Node and Pod lists into a contract snapshot; the result passes
    ``models.load_snapshot`` (checked here; raises InputError otherwise, also for
    fields of the wrong type, naming the object where it can). ``events_doc``, the
    output of ``kubectl get events -A -o json``, gives ``recent_evictions`` (R15)."""
    try:
        return _build(nodes_doc, pods_doc, config, now, events_doc)
    except InputError:
        raise
    except SHAPE_ERRORS as exc:
        raise _shape_error("nodes and pods", "", exc) from None


def _build(nodes_doc: Any, pods_doc: Any, config: K8sConfig | None,
           now: datetime | None, events_doc: Any = None) -> K8sSnapshot:
    from planner.k8s.objects import items_of

    cfg = config or K8sConfig()
    now = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    b = _Builder(cfg, now)
    nodes: dict[str, dict[str, Any]] = {}
    for rec in _each(items_of(nodes_doc, "Node", "nodes"), b.node, "nodes"):
        if rec is not None:
            nodes[rec["id"]] = rec
    pods = [p for p in _each(items_of(pods_doc, "Pod", "pods"), b.pod, "pods") if p is not None]
    pods = b.assign_gpus(nodes, pods)

    groups: dict[tuple[str, str], list[Pod]] = defaultdict(list)
    singles: list[Pod] = []
    for p in pods:
        p.group = b.group_of(p)
        if p.group is None:
            singles.append(p)
        else:
            groups[(p.namespace, p.group)].append(p)

    jobs: list[dict[str, Any]] = []
    meta_jobs: dict[str, dict[str, Any]] = {}

    def add(job_id: str, members: list[Pod], group: str | None) -> None:
        members = sorted(members, key=Pod.sort_key)
        rec = b.job(job_id, members, group)
        if rec is None:  # a running group with unequal GPUs per node: one job per pod
            b.warn(f"job {job_id}: running pods hold different GPU counts per node; each pod "
                   "is planned as its own job (evicting one may stall the rest of the group)")
            for p in members:
                add(f"{p.namespace}/{p.name}", [p], group)
            return
        jobs.append(rec)
        meta_jobs[job_id] = {"namespace": members[0].namespace, "group": group,
                             "state": rec["state"], "pods": [p.name for p in members]}

    for p in singles:
        add(p.ref, [p], None)
    for (ns, group), members in groups.items():
        if len(members) == 1:
            add(members[0].ref, members, group)
            continue
        run = [p for p in members if p.running]
        wait = [p for p in members if not p.running]
        base = f"{ns}/group:{group}"
        if run:
            add(base, run, group)
        if wait:
            add(base + "+pending" if run else base, wait, group)

    jobs.sort(key=lambda j: j["id"])
    snapshot: dict[str, Any] = {
        "version": 1,
        "now": iso(now),
        "_comment": f"generated by preempt-planner k8s snapshot from {len(nodes)} GPU node(s) "
                    f"and {len(pods)} GPU pod(s)",
        "storage": [s.model_dump(mode="json") for s in cfg.storage],
        "nodes": [nodes[k] for k in sorted(nodes)],
        "jobs": jobs,
    }
    if cfg.policy is not None:
        snapshot["policy"] = cfg.policy
    if events_doc is not None:
        pod_job = {(m["namespace"], pod): job for job, m in meta_jobs.items() for pod in m["pods"]}
        sizes = {j["id"]: j["gpus_per_node"] * j.get("nodes", 1) for j in jobs}
        snapshot["recent_evictions"] = eviction_history(events_doc, cfg, now, pod_job, b.warn,
                                                        sizes)
    meta = {"kind": META_KIND, "version": 1, "now": iso(now), "prefix": cfg.prefix,
            "jobs": {k: meta_jobs[k] for k in sorted(meta_jobs)}, "warnings": b.warnings}
    snapshot["_k8s"] = meta
    try:
        load_snapshot(snapshot)
    except InputError as exc:
        raise InputError(["the generated snapshot is invalid (check the adapter config):",
                          *exc.errors], "k8s snapshot") from None
    return K8sSnapshot(snapshot=snapshot, meta=meta, warnings=b.warnings)


EVENT_DEDUP_S = 60.0  # events of one job this close together are one eviction (a gang's pods)


def eviction_history(events_doc: Any, cfg: K8sConfig, now: datetime,
                     pod_job: dict[tuple[str, str], str],
                     warn: Any, sizes: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """``recent_evictions`` (R15) from an EventList: events of a Pod whose reason is
    one of ``cfg.eviction_event_reasons`` (``Preempted`` from kube-scheduler,
    ``Evicted`` from the kubelet, ``PreemptPlannerEviction`` written by ``k8s
    apply``), within the last ``cfg.eviction_history_s`` before ``now``. A pod of a
    current job counts as that job (with its GPUs, ``sizes``); the events of one job
    within EVENT_DEDUP_S of each other are one eviction. Oldest first."""
    from planner.k8s.objects import items_of

    reasons = set(cfg.eviction_event_reasons)

    def one(ev: dict[str, Any]) -> tuple[str, datetime] | None:
        obj = ev.get("involvedObject") or ev.get("regarding") or {}
        if ev.get("reason") not in reasons or obj.get("kind") != "Pod":
            return None
        at = next((t for t in (parse_time(ev.get(k)) for k in (
            "eventTime", "lastTimestamp", "firstTimestamp")) if t is not None),
            parse_time(ev["metadata"].get("creationTimestamp")))
        ns, name = obj.get("namespace") or "default", obj.get("name")
        if at is None or not name:
            warn(f"event {ev['metadata']['name']}: an eviction with no time or no pod; ignored")
            return None
        if at > now or (now - at).total_seconds() > cfg.eviction_history_s:
            return None
        return pod_job.get((ns, name), f"{ns}/{name}"), at

    seen: dict[str, list[datetime]] = defaultdict(list)
    for hit in _each(items_of(events_doc, "Event", "events"), one, "events"):
        if hit is not None:
            seen[hit[0]].append(hit[1])
    out = []
    for job, times in seen.items():
        last = None
        for t in sorted(times):
            if last is None or (t - last).total_seconds() > EVENT_DEDUP_S:
                rec: dict[str, Any] = {"job": job, "at": iso(t)}
                if sizes and job in sizes:
                    rec["gpus"] = sizes[job]
                out.append(rec)
                last = t
    return sorted(out, key=lambda e: (e["at"], e["job"]))
