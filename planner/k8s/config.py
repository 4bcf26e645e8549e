"""Adapter configuration: how Kubernetes objects map onto the data contract.

Every field has a default that works with the NVIDIA GPU Operator (GPU Feature
Discovery labels) and the common gang schedulers, so an empty file is valid.
See ``docs/kubernetes.md`` for the meaning of each field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from models import InputError, Storage, read_document
from models.snapshot import NvlinkSpec

PREFIX = "preempt-planner.io/"


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TierClass(_Cfg):
    """A PriorityClass mapped to a tier, with the job's priority inside that tier."""

    tier: int
    priority: int = 0


class GroupKey(_Cfg):
    """Where a pod names its group: one annotation or one label key."""

    annotation: str | None = None
    label: str | None = None

    @model_validator(mode="after")
    def _one(self) -> GroupKey:
        if (self.annotation is None) == (self.label is None):
            raise ValueError("give exactly one of 'annotation' or 'label'")
        return self

    def read(self, meta: dict[str, Any]) -> str | None:
        src = meta.get("annotations") if self.annotation else meta.get("labels")
        value = (src or {}).get(self.annotation or self.label)
        return value if isinstance(value, str) and value else None

    def describe(self) -> str:
        return f"annotation {self.annotation}" if self.annotation else f"label {self.label}"


DEFAULT_GROUP_KEYS: tuple[GroupKey, ...] = (
    GroupKey(annotation="scheduling.k8s.io/group-name"),  # Volcano
    GroupKey(label="kueue.x-k8s.io/pod-group-name"),  # Kueue plain pod groups
    GroupKey(label="scheduling.x-k8s.io/pod-group"),  # scheduler-plugins coscheduling
    GroupKey(annotation="pod-group-name"),  # NVIDIA KAI Scheduler
)


class K8sConfig(_Cfg):
    """Mapping rules of ``preempt-planner k8s snapshot`` (all optional)."""

    gpu_resource: str = "nvidia.com/gpu"
    prefix: str = Field(default=PREFIX, description="prefix of the adapter's own annotations and labels")
    # tiers
    priority_classes: dict[str, int | TierClass] = Field(default_factory=dict)
    default_tier: int = 3
    # gangs
    group_keys: list[GroupKey] = Field(default_factory=lambda: list(DEFAULT_GROUP_KEYS))
    # nodes
    gpu_product_label: str = "nvidia.com/gpu.product"
    gpu_types: dict[str, str] = Field(default_factory=dict,
                                      description="GPU product label value -> contract gpu_type")
    pool_label: str | None = PREFIX + "pool"
    default_pool: str = "default"
    block_labels: list[str] = Field(default_factory=lambda: [PREFIX + "block",
                                                             "topology.kubernetes.io/zone"])
    nvlink_domain_label: str | None = "nvidia.com/gpu.clique"
    default_nvlink: NvlinkSpec = "nvswitch"
    nvlink_by_product: dict[str, NvlinkSpec] = Field(default_factory=dict)
    nvlink_by_node: dict[str, NvlinkSpec] = Field(default_factory=dict)
    storage: list[Storage] = Field(default_factory=list)
    storage_label: str | None = PREFIX + "storage"
    default_storage: str | None = None
    local_write_gb_per_s: float | None = Field(default=None, gt=0)
    drain_taints: list[str] = Field(default_factory=list)
    # pods
    default_topology: Literal["nvlink", "any"] = "nvlink"
    include_gated: bool = False
    namespaces: list[str] | None = None
    team_label: str | None = None
    gpu_ids_annotations: list[str] = Field(default_factory=lambda: [PREFIX + "gpu-ids"])
    # the contract policy written into the snapshot (None = contract defaults)
    policy: dict[str, Any] | None = None
    # R15's history from 'kubectl get events' (k8s snapshot --events): the reasons that
    # mean a pod was evicted, and how far back they count
    eviction_event_reasons: list[str] = Field(default_factory=lambda: [
        "Preempted", "Evicted", "PreemptPlannerEviction"])
    eviction_history_s: float = Field(default=86400.0, gt=0)

    def tier_of_class(self, name: str | None) -> tuple[int, int]:
        """(tier, priority) of a PriorityClass name; the default tier when unmapped."""
        spec = self.priority_classes.get(name or "")
        if spec is None:
            return self.default_tier, 0
        if isinstance(spec, int):
            return spec, 0
        return spec.tier, spec.priority

    def key(self, name: str) -> str:
        """An adapter annotation key, e.g. ``key("signal")`` -> ``preempt-planner.io/signal``."""
        return self.prefix + name


def load_config(source: str | Path | dict[str, Any] | K8sConfig | None) -> K8sConfig:
    """Read and validate an adapter config (JSON or YAML); raises InputError."""
    if isinstance(source, K8sConfig):
        return source
    name = None
    if isinstance(source, (str, Path)):
        name = str(source)
        source = read_document(source)
    if source is None:
        source = {}
    if not isinstance(source, dict):
        raise InputError(["config: must be an object"], name)
    data = {k: v for k, v in source.items() if not (isinstance(k, str) and k.startswith("_"))}
    try:
        return K8sConfig.model_validate(data)
    except ValidationError as exc:
        msgs = []
        for e in exc.errors():
            loc = ".".join(str(p) for p in e["loc"])
            msg = e["msg"].removeprefix("Value error, ")
            if e["type"] == "extra_forbidden":
                msg = "unknown field"
            msgs.append(f"config.{loc}: {msg}")
        raise InputError(msgs, name) from None
