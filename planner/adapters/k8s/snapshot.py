"""Build a contract snapshot (format v1) from ``kubectl get nodes -o json`` and
``kubectl get pods -A -o json``.

Job ids: a lone pod is ``<namespace>/<pod>``; a pod group (gang) is
``<namespace>/group:<group>``, and the pending rest of a partly running group is
``<namespace>/group:<group>+pending``. Pod names never contain ``:`` or ``+``,
and a group name is used only when it matches GROUP_NAME (no ``/``, ``:``,
``+``, ``@``, blank or control character), so the forms cannot collide. GPUs held
by pods the planner must never evict (DaemonSet, static and terminating pods,
pods outside ``namespaces``, ...) are held by one stand-in job per node,
``k8s-occupied@<node>``, in the non-preemptible ``occupied_tier``. The snapshot
carries, under the comment key ``_k8s`` (ignored by the loader), the pods of every
job, which is what ``k8s apply`` needs to turn a plan back into API objects.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from models import SHAPE_ERRORS, InputError, Policy, load_snapshot
from models.policy import (
    MAX_COUNT,
    MAX_GB,
    MAX_GB_PER_S,
    MAX_PRIORITY,
    MAX_SECONDS,
    MIN_GB_PER_S,
)
from models.snapshot import NvlinkEdges
from planner.adapters.gpu_models import model_layout
from planner.adapters.k8s.config import GroupKey, K8sConfig
from planner.adapters.k8s.objects import (
    GROUP_NAME_RULE,
    LATEST,
    islands,
    iso,
    mig_profile,
    mig_type,
    natural_key,
    node_ready,
    parse_bool,
    parse_gpu_ids,
    parse_int,
    parse_number,
    parse_nvlink,
    parse_signal,
    parse_time,
    pod_gpu_resources,
    shown,
    single_mig_profile,
    time_out_of_range,
    valid_group_name,
    valid_namespace,
    valid_pod_name,
    whole,
)

META_KIND = "preempt-planner/k8s-meta"
OCCUPIED_PREFIX = "k8s-occupied@"
"""Id prefix of the stand-in jobs that hold the GPUs of pods the planner must never
evict (``k8s-occupied@<node>``): never a victim (a non-preemptible tier), never a
job of pods 'k8s apply' acts on."""
MAX_GPUS_PER_NODE = 1024  # the contract's gpus_per_node (docs/format.md, "Limits")

# Why a running pod's GPUs are occupied rather than planned (Pod.hold), as the
# summary warnings say it
HOLD_WHY = {
    "namespace": "outside the config's namespaces",
    "name": "whose namespace or name is not a Kubernetes name (a hand-edited file?)",
    "terminating": "terminating (metadata.deletionTimestamp is set)",
    "daemonset": "of a DaemonSet",
    "static": "static (mirror pods of the kubelet's own manifests)",
}


@dataclass
class Pod:
    """The fields of one GPU pod that the adapter uses. A pod that holds several GPU
    resources (whole GPUs and MIG slices) is one Pod per resource: ``part`` names the
    resource of every part but the first."""

    namespace: str
    name: str
    gpus: int
    node: str | None  # spec.nodeName
    running: bool
    annotations: dict[str, str]
    labels: dict[str, str]
    priority_class: str | None
    created_at: datetime | None
    started_at: datetime | None
    spec: dict[str, Any]
    group: str | None = None
    gpu_ids: list[int] = field(default_factory=list)
    resource: str = "nvidia.com/gpu"
    mig: str | None = None  # the MIG profile of the resource ("mixed" strategy)
    part: str | None = None
    uid: str | None = None  # metadata.uid: 'k8s apply' evicts only this very pod
    resource_version: str | None = None  # metadata.resourceVersion: ... unchanged
    # why the pod is never a victim (a key of HOLD_WHY, "group-name", "mixed-group"):
    # its GPUs are occupied (a stand-in job holds them) and it is no job of its own
    hold: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def job_ref(self) -> str:
        """The job id of a lone pod: ``ns/pod``, ``ns/pod@mig-1g.10gb`` for a part."""
        return self.ref + (f"@{self.part}" if self.part else "")

    @property
    def node_id(self) -> str | None:
        """The contract node it runs on: the node, or ``node/mig-<profile>``."""
        if self.node is None:
            return None
        return f"{self.node}/mig-{self.mig}" if self.mig else self.node

    def sort_key(self) -> tuple[Any, ...]:
        return (natural_key(self.name), self.namespace)


@dataclass
class K8sSnapshot:
    """The contract snapshot (a dict ready for JSON), the pod mapping and warnings."""

    snapshot: dict[str, Any]
    meta: dict[str, Any]
    warnings: list[str]


def _text(value: Any) -> str | None:
    """A non-empty string field of an object, else None."""
    return value if isinstance(value, str) and value else None


def _some(ids: list[str]) -> str:
    """At most five of ``ids`` (sorted), then how many more."""
    ids = sorted(ids)
    return ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def _hold(meta: dict[str, Any], ns: str, name: str, outside: bool) -> str | None:
    """Why a GPU pod is never a victim, whatever its tier (a key of HOLD_WHY), or
    None: a pod of another namespace than the config's ``namespaces``, a pod whose
    names no API server would accept, a terminating pod (it is going already, and
    holds its GPUs until it has gone), a static (mirror) pod, which the kubelet runs
    from a file and the API cannot evict, and a DaemonSet's pod, which its
    controller recreates on the same node at once."""
    if outside:
        return "namespace"
    if not (valid_namespace(ns) and valid_pod_name(name)):
        return "name"
    if meta.get("deletionTimestamp"):
        return "terminating"
    owners = {o.get("kind") for o in meta.get("ownerReferences") or [] if isinstance(o, dict)}
    if "kubernetes.io/config.mirror" in dict(meta.get("annotations") or {}) or "Node" in owners:
        return "static"
    if "DaemonSet" in owners:
        return "daemonset"
    return None


def _policy_tiers(cfg: K8sConfig) -> list[int] | None:
    """The tiers of the config's policy (merged over the contract's defaults), which a
    tier annotation may name; None when the policy is invalid (the loader says why)."""
    try:
        return sorted(Policy.model_validate(cfg.policy or {}).tiers)
    except SHAPE_ERRORS:
        return None


def _nvlink_problem(gpus: int, spec: Any) -> str | None:
    """Why a node's own NVLink value (label or annotation) is no layout of its GPUs
    (the loader's words), or None: one node's label must not refuse the snapshot."""
    try:
        load_snapshot({"version": 1, "now": "2026-01-01T00:00:00Z",
                       "nodes": [{"id": "n", "gpus": gpus, "nvlink": spec}]})
    except InputError as exc:
        return "; ".join(e.partition(": ")[2] or e for e in exc.errors)
    return None


def _nvlink_json(spec: Any) -> Any:
    if isinstance(spec, NvlinkEdges):
        return {"edges": [list(e) for e in spec.edges]}
    return spec


class _Builder:
    def __init__(self, cfg: K8sConfig, now: datetime):
        self.cfg = cfg
        self.now = now
        self.warnings: list[str] = []
        self.mig_nodes: dict[str, dict[str, str]] = {}  # node/mig-<profile> -> node, resource
        self.unknown_nvlink: dict[str, list[str]] = defaultdict(list)
        self.nvlink_why: dict[str, str] = {}  # product -> why its layout is not known
        self.node_joined: dict[str, datetime] = {}  # Node -> its creationTimestamp
        self.oldest_start: datetime | None = None  # the earliest start of any GPU pod
        self.own_domain: dict[str, list[str]] = defaultdict(list)  # model -> nodes (NVL72)
        self._warned_local: set[str] = set()
        self.mapped: set[str] = set()  # jobs whose tier the config or an annotation gives
        self.unmapped: dict[str, list[str]] = defaultdict(list)  # class -> jobs at default_tier
        self.unsaid_signal: list[str] = []  # running jobs priced with the default signal null
        self.assumed_ids: dict[str, list[str]] = {}  # node (islands/edges) -> pods guessed
        self.left_out: dict[str, list[str]] = defaultdict(list)  # hold -> pending pods
        self.policy_tiers = _policy_tiers(cfg)  # the tiers an annotation may name

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    # ------------------------------------------------------------------ nodes
    def nodes(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """The contract nodes of one Node: its whole GPUs (``gpu_resource``) as the node
        itself, and with ``mig_resources`` each MIG profile resource of the "mixed"
        strategy as a node ``<name>/mig-<profile>`` of its own (slices of one profile
        are interchangeable, and different profiles are different GPU types). Each
        device is counted once: the device plugin advertises a MIG slice under its
        profile or, with the "single" strategy, under ``gpu_resource``, never both."""
        cfg = self.cfg
        meta = obj["metadata"]
        name = meta["name"]
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        status = obj.get("status") or {}
        joined = parse_time(meta.get("creationTimestamp"))
        if joined is not None:  # a pod there cannot have started before the node joined
            self.node_joined[name] = joined
        alloc = status.get("allocatable") or {}
        cap = status.get("capacity") or {}

        def amount(resource: str) -> Any:
            return alloc[resource] if resource in alloc else cap.get(resource)

        migs = {}
        if cfg.mig_resources:
            for key in sorted({*alloc, *cap}):
                profile = mig_profile(key, cfg.gpu_resource) if isinstance(key, str) else None
                if profile is not None:
                    migs[profile] = key
        raw = amount(cfg.gpu_resource)
        if raw is None and not migs:
            return []  # not a GPU node
        out = []
        if raw is not None:
            gpus = whole(raw)
            if gpus == 0 and migs:
                pass  # every GPU is split into MIG slices
            elif gpus is None or gpus < 1 or gpus > 1024:
                self.warn(f"node {name}: {cfg.gpu_resource} allocatable {raw!r} is not 1..1024 "
                          "whole GPUs; node skipped")
            else:
                out.append(self._gpu_node(obj, name, gpus, labels, annotations))
        for profile, key in migs.items():
            n = whole(amount(key))
            if n == 0:
                continue
            if n is None or n > 1024:
                self.warn(f"node {name}: {key} allocatable {amount(key)!r} is not 0..1024 "
                          "whole MIG devices; ignored")
                continue
            rec = self._common(obj, f"{name}/mig-{profile}", n, labels, annotations)
            rec["gpu_type"] = cfg.gpu_types.get(mig_type(profile), mig_type(profile))
            rec["nvlink"] = "none"  # MIG slices have no NVLink (no peer-to-peer at all)
            self.mig_nodes[rec["id"]] = {"node": name, "resource": key}
            out.append(self._order(rec))
        return out

    @staticmethod
    def _order(rec: dict[str, Any]) -> dict[str, Any]:
        keys = ("id", "gpus", "gpu_type", "nvlink", "pool", "block", "nvlink_domain",
                "storage", "local_write_gb_per_s", "state")
        return {k: rec[k] for k in keys if k in rec}

    def _gpu_node(self, obj: dict[str, Any], name: str, gpus: int, labels: dict[str, str],
                  annotations: dict[str, str]) -> dict[str, Any]:
        cfg = self.cfg
        product = labels.get(cfg.gpu_product_label)
        rec = self._common(obj, name, gpus, labels, annotations)
        if product:
            rec["gpu_type"] = self.product_type(product)
        rec["nvlink"] = self._nvlink(name, gpus, product, labels, annotations)
        domain = labels.get(cfg.nvlink_domain_label) if cfg.nvlink_domain_label else None
        if domain:
            rec["nvlink_domain"] = domain
        else:
            model = model_layout([product])
            if model.nvl72:  # one domain per node: never claims a link between nodes
                rec["nvlink_domain"] = name
                self.own_domain[model.word].append(name)
        replicas = parse_int(labels.get(f"{cfg.gpu_resource.partition('/')[0]}/gpu.replicas",
                                        "0"))
        if replicas is not None and replicas > 1:
            self.warn(f"node {name}: its GPUs are shared ({replicas} replicas each, "
                      f"time-slicing or MPS): the {gpus} {cfg.gpu_resource} are replicas, "
                      "not GPUs, and the planner treats each as a GPU of its own")
        return self._order(rec)

    def product_type(self, product: str) -> str:
        """The contract ``gpu_type`` of a product label value: ``gpu_types`` renames it;
        a MIG slice of the "single" strategy (``...-MIG-1g.5gb``) is ``MIG-1g.5gb``, like
        the same profile under the "mixed" strategy."""
        cfg = self.cfg
        if product in cfg.gpu_types:
            return cfg.gpu_types[product]
        profile = single_mig_profile(product)
        if profile is not None:
            return cfg.gpu_types.get(mig_type(profile), mig_type(profile))
        return product

    def _common(self, obj: dict[str, Any], node_id: str, gpus: int, labels: dict[str, str],
                annotations: dict[str, str]) -> dict[str, Any]:
        """The fields every contract node of a Node shares."""
        cfg = self.cfg
        name = obj["metadata"]["name"]
        rec: dict[str, Any] = {"id": node_id, "gpus": gpus}
        pool = labels.get(cfg.pool_label) if cfg.pool_label else None
        rec["pool"] = pool or cfg.default_pool
        block = next((labels[k] for k in cfg.block_labels if labels.get(k)), None)
        if block:
            rec["block"] = block
        storage = (labels.get(cfg.storage_label) if cfg.storage_label else None) \
            or cfg.default_storage
        if storage:
            rec["storage"] = storage
        local = cfg.local_write_gb_per_s
        text = annotations.get(cfg.key("local-write-gb-per-s"))
        if text is not None:
            v = parse_number(text)
            if v is None or not MIN_GB_PER_S <= v <= MAX_GB_PER_S:
                if name not in self._warned_local:
                    self._warned_local.add(name)
                    self.warn(f"node {name}: annotation {cfg.key('local-write-gb-per-s')}="
                              f"{text!r} is not a number from {MIN_GB_PER_S:g} to "
                              f"{MAX_GB_PER_S:g}; ignored")
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

    def _explicit_nvlink(self, name: str, gpus: int, product: str | None,
                         labels: dict[str, str],
                         annotations: dict[str, str]) -> tuple[Any, str | None]:
        """The layout the node or the config states: the node's annotation or label,
        ``nvlink_by_node``, ``nvlink_by_product``; (None, None) when none does."""
        cfg = self.cfg
        key = cfg.key("nvlink")
        text = annotations.get(key, labels.get(key))
        if text is not None:
            spec = parse_nvlink(text)
            if isinstance(spec, tuple):
                return islands(gpus, spec[1]), key
            problem = _nvlink_problem(gpus, spec) if spec is not None else None
            if spec is not None and problem is None:
                return spec, key
            what = (f"is no NVLink layout of its {gpus} GPUs ({problem})" if problem else
                    "is not nvswitch, none, islands-N or JSON")
            self.warn(f"node {name}: {key}={text!r} {what}; using the configured layout")
        if name in cfg.nvlink_by_node:
            return _nvlink_json(cfg.nvlink_by_node[name]), "nvlink_by_node"
        if product and product in cfg.nvlink_by_product:
            return _nvlink_json(cfg.nvlink_by_product[product]), "nvlink_by_product"
        return None, None

    def _nvlink(self, name: str, gpus: int, product: str | None, labels: dict[str, str],
                annotations: dict[str, str]) -> Any:
        """The node's NVLink layout: "none" for MIG slices ("single" strategy) whatever
        is configured; else the node's annotation or label, ``nvlink_by_node``,
        ``nvlink_by_product``; else the layout known for the GPU model (product label);
        else ``default_nvlink`` when configured; else "none", with a warning (an
        unknown model must not be claimed to be linked all-to-all)."""
        explicit, where = self._explicit_nvlink(name, gpus, product, labels, annotations)
        if single_mig_profile(product) is not None:
            if explicit is not None and explicit != "none":
                self.warn(f"node {name}: {where} gives NVLink layout {json.dumps(explicit)}, "
                          f"but its GPUs are MIG slices ({product}), which have no NVLink; "
                          "using none")
            return "none"
        if explicit is not None:
            return explicit
        model = model_layout([product])
        if model.layout is not None:
            return model.layout
        if self.cfg.default_nvlink is not None:
            return _nvlink_json(self.cfg.default_nvlink)
        if gpus > 1:  # one GPU needs no link: its layout does not matter
            self.unknown_nvlink[product or ""].append(name)
            self.nvlink_why[product or ""] = model.why()
        return "none"

    def warn_unknown_nvlink(self) -> None:
        """One warning per GPU model whose NVLink layout is not known (see _nvlink)."""
        label = self.cfg.gpu_product_label
        for product, names in sorted(self.unknown_nvlink.items()):
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5
                                            else "")
            model = (f"GPU model {product!r} ({label})" if product
                     else f"GPU model (no {label} label)")
            why = self.nvlink_why.get(product, "")
            self.warn(f"node(s) {shown}: NVLink layout of {model} is not known"
                      f"{f' ({why})' if why else ''}; assuming "
                      "none (no NVLink: jobs of several GPUs that need NVLink are not placed "
                      "there). Set nvlink_by_product, nvlink_by_node or default_nvlink in the "
                      f"config, or the node label {self.cfg.key('nvlink')}")
        label = self.cfg.nvlink_domain_label or "nvidia.com/gpu.clique"
        for word, names in sorted(self.own_domain.items()):
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5
                                            else "")
            self.warn(f"node(s) {shown}: {word} nodes share an NVLink domain (an NVL72 rack), "
                      f"but they have no {label} label: each node is taken as its own domain "
                      "(a job that asks for one NVLink domain stays on one node); label them "
                      f"{label} (GPU Feature Discovery does) or set nvlink_domain_label")

    # ------------------------------------------------------------------- pods
    def pod(self, obj: dict[str, Any]) -> list[Pod]:
        """The GPU pod of a Pod object (a list: empty when it holds no GPUs or is
        skipped, one Pod per GPU resource when it holds whole GPUs and MIG slices)."""
        cfg = self.cfg
        meta = obj["metadata"]
        ns = meta.get("namespace") or "default"
        name = meta["name"]
        outside = cfg.namespaces is not None and ns not in cfg.namespaces
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        phase = status.get("phase") or "Pending"
        if phase in ("Succeeded", "Failed"):
            return []  # completed pods hold nothing
        counts = pod_gpu_resources(obj, cfg.gpu_resource, cfg.mig_resources)
        if not counts:
            return []
        node = spec.get("nodeName") or None
        if node is None and phase != "Pending":
            return []
        if node is None and outside:
            return []  # another namespace's queue: not the planner's to place
        hold = _hold(meta, ns, name, outside)
        if node is None and hold is not None:  # never placed by the planner: left out
            self.left_out[hold].append(f"{ns}/{name}" if hold != "name"
                                       else shown(f"{ns}/{name}"))
            return []
        if node is None and spec.get("schedulingGates") and not cfg.include_gated:
            self.warn(f"pod {ns}/{name}: has scheduling gates (not yet admitted); skipped")
            return []
        # whole GPUs first, then the MIG profiles by name
        order = sorted(counts, key=lambda r: (r != cfg.gpu_resource, r))
        said = ", ".join(f"{counts[r]} {r}" for r in order)
        if len(order) > 1 and node is None:
            self.warn(f"pod {ns}/{name}: requests several GPU resources ({said}), which no "
                      "single contract job can hold; not planned (the scheduler places it)")
            return []
        out = []
        for i, r in enumerate(order):
            out.append(Pod(namespace=ns, name=name, gpus=counts[r], node=node,
                           running=node is not None,
                           annotations=dict(meta.get("annotations") or {}),
                           labels=dict(meta.get("labels") or {}),
                           priority_class=spec.get("priorityClassName"),
                           created_at=parse_time(meta.get("creationTimestamp")),
                           started_at=parse_time(status.get("startTime")), spec=spec,
                           resource=r, mig=mig_profile(r, cfg.gpu_resource),
                           part=r.partition("/")[2] if i else None,
                           uid=_text(meta.get("uid")),
                           resource_version=_text(meta.get("resourceVersion")), hold=hold))
        if len(out) > 1 and hold is None:
            self.warn(f"pod {ns}/{name}: holds several GPU resources ({said}); planned as one "
                      f"job per resource ({', '.join(p.job_ref for p in out)}): evicting one "
                      "evicts the pod, and each job's cost counts only its own GPUs")
        return out

    def assign_gpus(self, nodes: dict[str, dict[str, Any]], pods: list[Pod]) -> list[Pod]:
        """GPU indices of running pods: an index annotation when valid, else the lowest
        free indices, node by node, pods in name order. Pods that do not fit are dropped."""
        by_node: dict[str, list[Pod]] = defaultdict(list)
        kept = []
        for p in pods:
            if not p.running:
                kept.append(p)
            elif p.node_id not in nodes:
                what = f"{p.resource} of node {p.node}" if p.mig else f"node {p.node}"
                self.warn(f"pod {p.job_ref}: runs on {what}, which is not in the snapshot "
                          "(no GPUs, or skipped); ignored")
            else:
                by_node[p.node_id].append(p)
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
            if rest and isinstance(nodes[node_id].get("nvlink"), (list, dict)):
                self.assumed_ids[node_id] = [p.job_ref for p in rest]
            for p in rest:
                free = [g for g in range(size) if g not in used]
                if len(free) < p.gpus:
                    self.warn(f"pod {p.job_ref}: needs {p.gpus} GPUs but node {node_id} has only "
                              f"{len(free)} left of {size} allocatable; ignored")
                    continue
                p.gpu_ids = free[: p.gpus]
                used.update(p.gpu_ids)
                kept.append(p)
        return kept

    def _annotated_ids(self, p: Pod, size: int, used: set[int]) -> list[int] | None:
        if p.part:
            return None  # the annotation names the indices of the pod's first resource
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

    def group_of(self, p: Pod) -> tuple[str, GroupKey] | None:
        """The pod's group name and the key that gives it (the first of group_keys)."""
        for gk in self.cfg.group_keys:
            value = gk.read({"annotations": p.annotations, "labels": p.labels})
            if value:
                return value, gk
        return None

    def capacity(self, nodes: dict[str, dict[str, Any]]) -> dict[str, int]:
        """The most devices of each GPU resource that one contract node has."""
        out: dict[str, int] = {}
        for node_id, rec in nodes.items():
            mig = self.mig_nodes.get(node_id)
            resource = mig["resource"] if mig else self.cfg.gpu_resource
            out[resource] = max(out.get(resource, 0), rec["gpus"])
        return out

    def too_big(self, p: Pod, capacity: dict[str, int]) -> str | None:
        """Why a pending pod cannot run on any node (None when it can): more GPUs than
        the contract's limit per node, or than any node of its resource has."""
        most = capacity.get(p.resource, 0)
        if p.gpus > MAX_GPUS_PER_NODE:
            return (f"requests {p.gpus} {p.resource}, more than the {MAX_GPUS_PER_NODE:,} the "
                    "contract allows on one node")
        if p.gpus > most:
            has = f"the largest has {most}" if most else f"no node has {p.resource}"
            return f"requests {p.gpus} {p.resource}, more than any node has ({has})"
        return None

    def mixed(self, members: list[Pod]) -> str | None:
        """Why the pods of one group cannot be one job (None when they can): they ask
        for different GPU resources, or name different GPU types."""
        resources = sorted({p.resource for p in members})
        if len(resources) > 1:
            return f"its pods ask for different GPU resources ({', '.join(resources)})"
        types = sorted({t for p in members if not p.mig
                        and (t := self._gpu_type([p])) is not None})
        if len(types) > 1:
            return f"its pods ask for different GPU types ({', '.join(map(repr, types))})"
        return None

    def hold_warnings(self, held: list[Pod]) -> None:
        """One warning per reason a pod is never a victim: the running pods whose GPUs
        the stand-in jobs occupy, and the pending pods left out."""
        run: dict[str, set[str]] = defaultdict(set)  # (a pod in parts is named once)
        for p in held:
            if p.hold in HOLD_WHY:
                run[p.hold].add(p.ref if p.hold != "name" else shown(p.ref))
        tier = self.cfg.occupied_tier
        for why, text in HOLD_WHY.items():
            if run.get(why):
                self.warn(f"{len(run[why])} running GPU pod(s) {text} ({_some(list(run[why]))}): "
                          f"never evicted; their GPUs count as occupied ({OCCUPIED_PREFIX}<node> "
                          f"jobs, tier {tier}, which nothing is planned onto)")
            if self.left_out.get(why):
                self.warn(f"{len(self.left_out[why])} pending GPU pod(s) {text}: left out, "
                          f"not planned ({_some(self.left_out[why])})")

    # ------------------------------------------------------------ annotations
    def _ann(self, pods: list[Pod], key: str) -> tuple[Pod, str] | None:
        """The first pod (name order) that has annotation ``prefix+key``."""
        full = self.cfg.key(key)
        for p in pods:
            if full in p.annotations:
                return p, p.annotations[full]
        return None

    def _number(self, pods: list[Pod], key: str, kind: str = "float",
                top: int | None = None) -> Any:
        """The annotation ``key`` of the first pod that has it: a number from 0 to 1e9,
        or with ``kind`` "int" a whole number from 0 (to ``top`` when given); None
        (with a warning) when it is not one."""
        found = self._ann(pods, key)
        if found is None:
            return None
        p, text = found
        v = parse_int(text) if kind == "int" else parse_number(text)
        if v is not None and top is not None and v > top:
            v = None
        if v is None:
            what = ("a number from 0 to 1e+09" if kind != "int" else
                    f"a whole number from 0 to {top:,}" if top is not None else
                    "a whole number >= 0")
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
            what = ("is outside 1970-01-01 to 9000-01-01" if time_out_of_range(text) else
                    "is not an ISO-8601 time with a zone or Unix seconds")
            self.warn(f"pod {p.ref}: annotation {self.cfg.key(key)}={text!r} {what}; ignored")
            return None
        return self._not_after_now(t, f"pod {p.ref}: annotation {self.cfg.key(key)}")

    def _not_after_now(self, t: datetime, what: str) -> datetime:
        if t > self.now:
            self.warn(f"{what}: {iso(t)} is after now ({iso(self.now)}); using now")
            return self.now
        return t

    def _sidecar(self, pods: list[Pod], job_id: str) -> dict[str, Any]:
        """Checkpoint fields from the trap's sidecar JSON, copied by the job into the
        ``checkpoint`` annotation of each writing pod: sizes add up over the pods,
        ``last_at`` is the oldest, times are the largest, the signal the first. Each
        value, and the sum of the sizes, is within the contract's limits (else it is
        ignored, with a warning)."""
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
                    top = MAX_GB if fld == "size_gb" else MAX_SECONDS
                    if isinstance(v, bool) or not isinstance(v, (int, float)) \
                            or not math.isfinite(v) or not 0 <= v <= top:
                        self.warn(f"pod {p.ref}: annotation {key}: {fld}={v!r} is not a "
                                  f"number from 0 to {top:g}; ignored")
                    elif fld == "size_gb":
                        sizes.append(float(v))
                    else:
                        out[fld] = max(out.get(fld, 0.0), float(v))
            if "last_at" in doc:
                t = parse_time(doc["last_at"])
                if t is None:
                    what = ("is outside 1970-01-01 to 9000-01-01"
                            if time_out_of_range(doc["last_at"]) else "is not a time")
                    self.warn(f"pod {p.ref}: annotation {key}: last_at={doc['last_at']!r} "
                              f"{what}; ignored")
                else:
                    lasts.append(t)
            if "signal" in doc and "signal" not in out:
                ok, sig = parse_signal(doc["signal"])
                if ok:
                    out["signal"] = sig
                else:
                    self.warn(f"pod {p.ref}: annotation {key}: unknown signal "
                              f"{doc['signal']!r}; ignored")
        if sizes and sum(sizes) > MAX_GB:
            self.warn(f"job {job_id}: the size_gb of its pods' {key} annotations add up to "
                      f"{sum(sizes):g} GB, more than {MAX_GB:g}; ignored")
        elif sizes:
            out["size_gb"] = sum(sizes)
        if lasts:
            out["last_at"] = self._not_after_now(min(lasts), f"annotation {key} last_at")
        return out

    def checkpoint(self, pods: list[Pod], job_id: str | None = None) -> dict[str, Any]:
        """The job's ``checkpoint``: the config's defaults for its namespace and
        PriorityClass (``signal`` null unless configured: no known trap, so an eviction
        loses the work since start), overridden field by field by the annotations, and
        those by the trap's sidecar."""
        first = pods[0]
        ck: dict[str, Any] = self.cfg.checkpoint_defaults(first.namespace, first.priority_class)
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
        sidecar = self._sidecar(pods, job_id or first.job_ref)
        ck.update(sidecar)  # measured at run time: wins over static values
        if "last_at" in ck:
            ck["last_at"] = iso(ck["last_at"])
        said = (found is not None and parse_signal(found[1])[0]) or "signal" in sidecar \
            or self.cfg.signal_configured(first.namespace, first.priority_class)
        if not said and first.running:
            self.unsaid_signal.append(job_id or first.job_ref)
        return ck

    # ------------------------------------------------------------------- jobs
    def _unknown_start(self, job_id: str, pods: list[Pod]) -> datetime:
        """The start of a running job whose pods say none: the earliest it can have
        started (so that evicting it is priced as losing the most it can have done):
        when its nodes joined the cluster, else the earliest start of any GPU pod,
        else now (nothing known), with a warning."""
        joined = [self.node_joined[p.node] for p in pods if p.node in self.node_joined]
        if joined:
            start, said = min(joined), "when its node joined the cluster (creationTimestamp)"
        elif self.oldest_start is not None:
            start, said = self.oldest_start, "at the earliest start of any GPU pod"
        else:
            self.warn(f"job {job_id}: no pod has a status.startTime or creationTimestamp, and "
                      "no node or pod says an earlier time; taken as started now (an eviction "
                      "loses no work by this count)")
            return self.now
        self.warn(f"job {job_id}: no pod has a status.startTime or creationTimestamp; taken "
                  f"as started {said}, {iso(start)}, the earliest it can have started (its "
                  "eviction is priced as losing all the work since)")
        return start

    def job(self, job_id: str, pods: list[Pod], group: str | None) -> dict[str, Any] | None:
        """One contract job from pods that are all running or all pending."""
        cfg = self.cfg
        first = pods[0]
        running = first.running
        tier, prio = cfg.tier_of_class(first.priority_class)
        mapped = (first.priority_class or "") in cfg.priority_classes
        classes = {p.priority_class for p in pods}
        if len(classes) > 1:
            self.warn(f"job {job_id}: pods have different priority classes "
                      f"{sorted(c or '' for c in classes)}; using {first.priority_class!r} "
                      f"of {first.name}")
        found_tier = self._ann(pods, "tier")
        if found_tier is not None:
            t = parse_int(found_tier[1])
            key = cfg.key("tier")
            if t is None:
                self.warn(f"pod {found_tier[0].ref}: annotation {key}={found_tier[1]!r} is not "
                          "a whole number >= 0; ignored")
            elif self.policy_tiers is not None and t not in self.policy_tiers:
                self.warn(f"pod {found_tier[0].ref}: annotation {key}={found_tier[1]!r} is not "
                          f"a tier of the policy ({', '.join(map(str, self.policy_tiers))}); "
                          "ignored")
            else:
                tier = t
                mapped = True
        if mapped:
            self.mapped.add(job_id)
        else:
            self.unmapped[first.priority_class or ""].append(job_id)
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
        if first.mig:  # MIG slices: the resource names the type, and there is no NVLink
            gpu_type = cfg.gpu_types.get(mig_type(first.mig), mig_type(first.mig))
            if found is not None and found[1] == "nvlink":
                self.warn(f"pod {found[0].ref}: annotation {cfg.key('topology')}=nvlink "
                          f"ignored: {first.resource} slices have no NVLink; planned as any")
            topology = "any"
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
            start = max((s for s in starts if s is not None), default=None)
            if start is None:
                start = self._unknown_start(job_id, pods)
            rec["started_at"] = iso(self._not_after_now(start, f"job {job_id}: startTime"))
            rec["placement"] = placement
            ends = self._deadline(job_id, pods)
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
        rec["checkpoint"] = self.checkpoint(pods, job_id)
        pre = [v for v in (self._number([p], "preemptions", "int", MAX_COUNT) for p in pods)
               if v is not None]
        if pre:
            rec["preemptions"] = max(pre)
        lasts = [t for t in (self._time([p], "last-preempted-at") for p in pods) if t]
        if lasts:
            rec["last_preempted_at"] = iso(max(lasts))
        return rec

    def _deadline(self, job_id: str, pods: list[Pod]) -> datetime | None:
        """R17: the earliest ``startTime + activeDeadlineSeconds`` of the pods (the
        kubelet kills a pod at its deadline, and a gang with it); None when a pod has
        no deadline. An annotation is no source: its owner could claim any end."""
        ends: list[datetime] = []
        for p in pods:
            limit = p.spec.get("activeDeadlineSeconds")
            if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0 \
                    or p.started_at is None:
                if ends or any(q.spec.get("activeDeadlineSeconds") for q in pods):
                    self.warn(f"job {job_id}: only some of its pods have "
                              "activeDeadlineSeconds (and a startTime); no expected end")
                return None
            # (a deadline beyond the contract's longest duration is as good as none soon:
            # taken as that long, within the contract's times)
            ends.append(min(p.started_at + timedelta(seconds=min(limit, MAX_SECONDS)),
                            LATEST - timedelta(seconds=1)))
        end = min(ends) if ends else None
        if end is not None and end < self.now:
            self.warn(f"job {job_id}: its activeDeadlineSeconds ended at {iso(end)}, before "
                      "now; the kubelet should have stopped it (not spared as ending soon)")
        return end

    def summary_warnings(self, nodes: dict[str, dict[str, Any]]) -> None:
        """One warning per assumption that many jobs or nodes share."""
        cfg = self.cfg

        def some(ids: list[str]) -> str:
            ids = sorted(ids)
            return ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")

        if self.mapped and self.unmapped:
            classes = ", ".join(f"{c or '(none)'}: {len(v)}"
                                for c, v in sorted(self.unmapped.items()))
            self.warn(f"{sum(map(len, self.unmapped.values()))} job(s) have no PriorityClass "
                      f"in priority_classes ({classes}): planned as default_tier "
                      f"{cfg.default_tier} ({some([j for v in self.unmapped.values() for j in v])})")
        if self.unsaid_signal:
            self.warn(f"{len(self.unsaid_signal)} running job(s) say nothing about a "
                      f"checkpoint signal (no {cfg.key('signal')} or {cfg.key('checkpoint')} "
                      "annotation, no job_defaults signal for their namespace or class): "
                      "priced as losing their work since start, signal null "
                      f"({some(self.unsaid_signal)})")
        for node_id, pods in sorted(self.assumed_ids.items()):
            self.warn(f"node {node_id}: GPU indices of {some(pods)} assumed (no "
                      f"{cfg.gpu_ids_annotations[0] if cfg.gpu_ids_annotations else 'gpu-ids'} "
                      "annotation: the lowest free ones, pods in name order); its NVLink "
                      f"layout {json.dumps(nodes[node_id]['nvlink'])} is not all-to-all, so "
                      "placements next to them follow this model, not the device plugin's "
                      "choice")

    def _running_placement(self, job_id: str, pods: list[Pod]) -> list[dict[str, Any]] | None:
        by_node: dict[str, list[int]] = defaultdict(list)
        order: list[str] = []
        for p in pods:
            if p.node_id not in by_node:
                order.append(p.node_id or "")
            by_node[p.node_id or ""].extend(p.gpu_ids)
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
                return self.product_type(value)
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
                return self.product_type(values.pop())
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
                   now: datetime | None = None, events_doc: Any = None, *,
                   default_tier: int | None = None) -> K8sSnapshot:
    """Convert Node and Pod lists into a contract snapshot; the result passes
    ``models.load_snapshot`` (checked here; raises InputError otherwise, also for
    fields of the wrong type, naming the object where it can). ``events_doc``, the
    output of ``kubectl get events -A -o json``, gives ``recent_evictions`` (R15).

    When no job gets its tier from ``priority_classes`` or a tier annotation, every
    job would get ``default_tier`` because of a missing or mis-keyed mapping: that is
    an InputError unless ``default_tier`` is given here (``k8s snapshot
    --default-tier N``), which also sets the config's ``default_tier``."""
    try:
        return _build(nodes_doc, pods_doc, config, now, events_doc, default_tier)
    except InputError:
        raise
    except SHAPE_ERRORS as exc:
        raise _shape_error("nodes and pods", "", exc) from None


def _build(nodes_doc: Any, pods_doc: Any, config: K8sConfig | None,
           now: datetime | None, events_doc: Any = None,
           default_tier: int | None = None) -> K8sSnapshot:
    from planner.adapters.k8s.objects import items_of

    cfg = config or K8sConfig()
    if default_tier is not None:
        cfg = cfg.model_copy(update={"default_tier": default_tier})
    now = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    b = _Builder(cfg, now)
    if b.policy_tiers is not None and cfg.occupied_tier in b.policy_tiers \
            and Policy.model_validate(cfg.policy or {}).tiers[cfg.occupied_tier].preemptible:
        raise InputError([(f"config: occupied_tier {cfg.occupied_tier} is preemptible in the "
                           "config's policy: the GPUs of pods the planner must never evict "
                           "would be evictable; give occupied_tier a tier the policy does not "
                           "define, or a non-preemptible one")], "k8s snapshot")
    node_objs = items_of(nodes_doc, "Node", "nodes")
    pod_objs = items_of(pods_doc, "Pod", "pods")
    if events_doc is not None:
        items_of(events_doc, "Event", "events")  # the wrong kind of document: say so first
    nodes: dict[str, dict[str, Any]] = {}
    for recs in _each(node_objs, b.nodes, "nodes"):
        for rec in recs:
            nodes[rec["id"]] = rec
    b.warn_unknown_nvlink()
    pods = [p for ps in _each(pod_objs, b.pod, "pods") for p in ps]
    pods = b.assign_gpus(nodes, pods)
    b.oldest_start = min((t for p in pods if (t := p.started_at or p.created_at) is not None),
                         default=None)

    held = [p for p in pods if p.hold]  # running: their GPUs are occupied (stand-ins)
    groups: dict[tuple[str, str], list[Pod]] = defaultdict(list)
    singles: list[Pod] = []
    unsafe: dict[tuple[str, str, GroupKey], list[Pod]] = defaultdict(list)
    for p in pods:
        if p.hold:
            continue
        found = None if p.part else b.group_of(p)
        if found is not None and not valid_group_name(found[0]):
            unsafe[(p.namespace, *found)].append(p)
            continue
        p.group = found[0] if found is not None else None
        if p.group is None:
            singles.append(p)
        else:
            groups[(p.namespace, p.group)].append(p)
    for (ns, name, gk), members in unsafe.items():
        # a name that could end a line of 'k8s apply --emit kubectl', or mean something
        # in a job id: not a group; its pods are never victims nor placed
        b.warn(f"pod(s) {_some([p.ref for p in members])}: group name {shown(name)} "
               f"({gk.describe()}) is not a name of the form {GROUP_NAME_RULE}; not planned: "
               "running pods' GPUs are occupied (never evicted), pending pods left out")
        _hold_running(members, "group-name", held)
    capacity = b.capacity(nodes)
    for p in list(singles):
        why = None if p.running else b.too_big(p, capacity)
        if why is not None:
            b.warn(f"pod {p.ref}: {why}; left out")
            singles.remove(p)
    for (ns, group), members in list(groups.items()):
        why = b.mixed(members)
        if why is not None:  # no one job can hold them: never victims nor placed
            b.warn(f"job {ns}/group:{group}: {why}; left out (its running pods' GPUs are "
                   "occupied, never evicted)")
            _hold_running(members, "mixed-group", held)
            del groups[(ns, group)]
            continue
        big = [(p, w) for p in members if not p.running and (w := b.too_big(p, capacity))]
        if big:
            b.warn(f"job {ns}/group:{group}: pod {big[0][0].ref} {big[0][1]}; its pending "
                   "pods are left out")
            groups[(ns, group)] = [p for p in members if p.running]
            if not groups[(ns, group)]:
                del groups[(ns, group)]

    jobs: list[dict[str, Any]] = []
    meta_jobs: dict[str, dict[str, Any]] = {}

    def add(job_id: str, members: list[Pod], group: str | None) -> None:
        members = sorted(members, key=Pod.sort_key)
        rec = b.job(job_id, members, group)
        if rec is None:  # a running group with unequal GPUs per node: one job per pod
            b.warn(f"job {job_id}: running pods hold different GPU counts per node; each pod "
                   "is planned as its own job (evicting one may stall the rest of the group)")
            for p in members:
                add(p.job_ref, [p], group)
            return
        jobs.append(rec)
        entry: dict[str, Any] = {"namespace": members[0].namespace, "group": group,
                                 "state": rec["state"], "pods": [p.name for p in members]}
        if rec["state"] == "running":  # what 'k8s apply' re-checks before evicting
            entry["nodes"] = {p.name: p.node for p in members}
            for key, attr in (("uids", "uid"), ("resource_versions", "resource_version")):
                known = {p.name: getattr(p, attr) for p in members if getattr(p, attr)}
                if known:
                    entry[key] = known
        meta_jobs[job_id] = entry

    for p in singles:
        add(p.job_ref, [p], None)
    for (ns, group), members in groups.items():
        if len(members) == 1:
            add(members[0].job_ref, members, group)
            continue
        run = [p for p in members if p.running]
        wait = [p for p in members if not p.running]
        base = f"{ns}/group:{group}"
        if run:
            add(base, run, group)
        if wait:
            add(base + "+pending" if run else base, wait, group)

    jobs.sort(key=lambda j: j["id"])
    if jobs and not b.mapped and default_tier is None:
        raise InputError([_no_tier_mapped(cfg, pods, len(jobs))], "k8s snapshot")
    b.summary_warnings(nodes)
    b.hold_warnings(held)
    occupied, stands_for = _occupied(cfg, now, held)
    jobs += occupied
    if events_doc is None:
        b.warn("no events (k8s snapshot --events): recent_evictions is empty, so the rolling "
               "eviction budget (R15) counts no evictions of earlier ticks")
    snapshot: dict[str, Any] = {
        "version": 1,
        "now": iso(now),
        "_comment": f"generated by preempt-planner k8s snapshot from {len(nodes)} GPU node(s) "
                    f"and {len(pods)} GPU pod(s)",
        "storage": [s.model_dump(mode="json") for s in cfg.storage],
        "nodes": [nodes[k] for k in sorted(nodes)],
        "jobs": jobs,
    }
    policy = _with_occupied_tier(cfg) if occupied else cfg.policy
    if policy is not None:
        snapshot["policy"] = policy
    snapshot["warnings"] = b.warnings  # plan() copies them into the plan's warnings
    if events_doc is not None:
        pod_job = {(m["namespace"], pod): job for job, m in meta_jobs.items() for pod in m["pods"]}
        sizes = {j["id"]: j["gpus_per_node"] * j.get("nodes", 1) for j in jobs}
        snapshot["recent_evictions"] = eviction_history(events_doc, cfg, now, pod_job, b.warn,
                                                        sizes)
    meta = {"kind": META_KIND, "version": 1, "now": iso(now), "prefix": cfg.prefix,
            "interval_s": cfg.interval_s, "max_plan_age_s": cfg.plan_age_limit_s(),
            "jobs": {k: meta_jobs[k] for k in sorted(meta_jobs)}, "warnings": b.warnings}
    if b.mig_nodes:
        meta["mig_nodes"] = {k: b.mig_nodes[k] for k in sorted(b.mig_nodes)}
    if occupied:  # what each stand-in stands for ('k8s apply' never acts on them)
        meta["occupied"] = stands_for
    snapshot["_k8s"] = meta
    try:
        load_snapshot(snapshot)
    except InputError as exc:
        raise InputError(["the generated snapshot is invalid (check the adapter config):",
                          *exc.errors], "k8s snapshot") from None
    return K8sSnapshot(snapshot=snapshot, meta=meta, warnings=b.warnings)


def _hold_running(members: list[Pod], why: str, held: list[Pod]) -> None:
    """The running pods of `members` are never victims: each is held for `why` (a
    hold reason) and added to `held` (their GPUs are occupied by stand-ins)."""
    for p in members:
        if p.running:
            p.hold = why
            held.append(p)


def _occupied(cfg: K8sConfig, now: datetime, held: list[Pod]
              ) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """One stand-in job per contract node for the GPUs of the held pods there:
    running, in the non-preemptible ``occupied_tier``, never a victim and never
    evicted by 'k8s apply' (it maps to no pods); and the pods each stands for."""
    by_node: dict[str, set[int]] = defaultdict(set)
    refs: dict[str, set[str]] = defaultdict(set)
    for p in held:
        by_node[p.node_id or ""].update(p.gpu_ids)
        refs[p.node_id or ""].add(p.ref)
    jobs = [{"id": f"{OCCUPIED_PREFIX}{node_id}", "tier": cfg.occupied_tier, "priority": 0,
             "state": "running", "gpus_per_node": len(gpus), "nodes": 1, "topology": "any",
             "started_at": iso(now), "placement": [{"node": node_id, "gpus": sorted(gpus)}],
             "checkpoint": {"signal": None}}
            for node_id, gpus in sorted(by_node.items())]
    return jobs, {f"{OCCUPIED_PREFIX}{n}": sorted(refs[n]) for n in sorted(refs)}


def _with_occupied_tier(cfg: K8sConfig) -> dict[str, Any]:
    """The config's policy with ``occupied_tier`` added, not preemptible, unless the
    policy defines it (then it must not be preemptible: checked in _build)."""
    policy = dict(cfg.policy or {})
    tiers = dict(policy.get("tiers") or {})
    t = cfg.occupied_tier
    if str(t) not in tiers and t not in tiers:
        tiers[str(t)] = {"preemptible": False, "min_runtime_s": 0, "can_preempt": []}
    policy["tiers"] = tiers
    return policy


def _no_tier_mapped(cfg: K8sConfig, pods: list[Pod], jobs: int) -> str:
    """The refusal when every job would fall to ``default_tier``: what to add."""
    seen: dict[str, set[str]] = defaultdict(set)
    for p in pods:
        seen[p.priority_class or ""].add(p.ref)
    classes = ", ".join(f"{c or '(none)'}: {len(v)} pod(s)"
                        for c, v in sorted(seen.items(), key=lambda kv: (-len(kv[1]), kv[0])))
    named = [c for c in sorted(seen, key=lambda c: (-len(seen[c]), c)) if c][:3] \
        or ["training-critical", "batch-low"]
    example = ", ".join(f"{c}: T" for c in named)
    have = (f"the config maps {sorted(cfg.priority_classes)}, which no pod uses"
            if cfg.priority_classes else "the config maps no PriorityClass")
    return (f"no job gets its tier from the config: {have}, and no pod has the "
            f"{cfg.key('tier')} annotation, so all {jobs} job(s) would get default_tier "
            f"{cfg.default_tier} (PriorityClasses of the GPU pods: {classes}). Add a "
            f"priority_classes mapping to the config (--config), for example "
            f"'priority_classes: {{{example}}}' with each class's tier T (1 reserved, 2 standard, "
            "3 opportunistic, or as your policy defines them), or pass --default-tier N to "
            "plan every job as tier N")


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
    from planner.adapters.k8s.objects import items_of

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
