"""Kubernetes adapter: snapshot from ``kubectl get nodes/pods -o json``, and a plan
back to ``policy/v1`` Evictions and ``v1`` Bindings (or kubectl commands).

No API server is contacted: the adapter reads and writes JSON, and ``kubectl``
(or any client) carries it to the cluster. See ``docs/kubernetes.md``.
"""

from planner.adapters.k8s.apply import (
    binding_objects,
    check_plan_age,
    eviction_objects,
    grace_seconds,
    job_pods,
    kubectl_script,
    node_name,
    object_list,
    plan_age_limit,
    read_meta,
)
from planner.adapters.k8s.config import CheckpointDefaults, JobDefaults, K8sConfig, load_config
from planner.adapters.k8s.snapshot import META_KIND, K8sSnapshot, build_snapshot

__all__ = [
    "META_KIND", "CheckpointDefaults", "JobDefaults", "K8sConfig", "K8sSnapshot",
    "binding_objects", "build_snapshot", "check_plan_age", "eviction_objects", "grace_seconds",
    "job_pods", "kubectl_script", "load_config", "node_name", "object_list", "plan_age_limit",
    "read_meta",
]
