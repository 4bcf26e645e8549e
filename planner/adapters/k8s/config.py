"""Adapter configuration: how Kubernetes objects map onto the data contract.

Every field has a default that works with the NVIDIA GPU Operator (GPU Feature
Discovery labels) and the common gang schedulers, so an empty file is valid.
See ``docs/kubernetes.md`` for the meaning of each field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from models import InputError, Storage, read_document
from models.policy import MAX_SECONDS
from models.snapshot import NvlinkSpec
from planner.adapters.checkpoint import CheckpointDefaultsBase

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


class CheckpointDefaults(CheckpointDefaultsBase):
    """Checkpoint fields for pods whose annotations do not give them (the contract's
    ``checkpoint`` object without ``last_at``). Only the fields written in the config
    count: an override for a namespace or a PriorityClass changes those and keeps
    the others."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("signal")
    @classmethod
    def _signal(cls, v: str | None) -> str | None:
        from planner.adapters.k8s.objects import parse_signal

        ok, sig = parse_signal(v)
        if not ok:
            raise ValueError(f"unknown signal {v!r} (e.g. SIGTERM, SIGUSR1, or null: it "
                             "cannot checkpoint on demand)")
        return sig


class JobDefaults(_Cfg):
    """Defaults for the jobs of pods that do not say otherwise in annotations."""

    checkpoint: CheckpointDefaults = Field(default_factory=CheckpointDefaults)


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
    # None: the layout known for the GPU model, else "none" with a warning (see _nvlink)
    default_nvlink: NvlinkSpec | None = None
    nvlink_by_product: dict[str, NvlinkSpec] = Field(default_factory=dict)
    nvlink_by_node: dict[str, NvlinkSpec] = Field(default_factory=dict)
    storage: list[Storage] = Field(default_factory=list)
    storage_label: str | None = PREFIX + "storage"
    default_storage: str | None = None
    local_write_gb_per_s: float | None = Field(default=None, gt=0)
    drain_taints: list[str] = Field(default_factory=list)
    # MIG "mixed" strategy: <domain>/mig-<profile> resources become GPUs of their own
    mig_resources: bool = True
    # pods
    default_topology: Literal["nvlink", "any"] = "nvlink"
    include_gated: bool = False
    namespaces: list[str] | None = None
    team_label: str | None = None
    gpu_ids_annotations: list[str] = Field(default_factory=lambda: [PREFIX + "gpu-ids"])
    # checkpoint defaults of pods without annotations: signal null (no known trap), so
    # an eviction loses the work since start; overrides per namespace, then per
    # PriorityClass, then the pod's annotations win, field by field
    job_defaults: JobDefaults = Field(default_factory=JobDefaults)
    job_defaults_by_namespace: dict[str, JobDefaults] = Field(default_factory=dict)
    job_defaults_by_priority_class: dict[str, JobDefaults] = Field(default_factory=dict)
    # the contract policy written into the snapshot (None = contract defaults)
    policy: dict[str, Any] | None = None
    # the tier of the stand-in jobs (k8s-occupied@<node>) that hold the GPUs of pods the
    # planner must never evict (DaemonSet, static and terminating pods, pods outside
    # namespaces, ...): added to the policy, not preemptible, when the policy lacks it
    occupied_tier: int = 9
    # R15's history from 'kubectl get events' (k8s snapshot --events): the reasons that
    # mean a pod was evicted, and how far back they count
    eviction_event_reasons: list[str] = Field(default_factory=lambda: [
        "Preempted", "Evicted", "PreemptPlannerEviction"])
    eviction_history_s: float = Field(default=86400.0, gt=0)
    # the snapshot-plan-apply loop: its tick, and how old a plan 'k8s apply' still
    # applies (None: 2 x interval_s)
    interval_s: float = Field(default=30.0, gt=0, le=MAX_SECONDS)
    max_plan_age_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)

    @model_validator(mode="after")
    def _occupied_tier_is_nobody_elses(self) -> K8sConfig:
        """The stand-ins' tier holds GPUs the planner must never evict: a PriorityClass
        or the default tier mapped to it would make those pods unevictable too."""
        used = [f"priority_classes.{name}" for name, spec in sorted(self.priority_classes.items())
                if (spec if isinstance(spec, int) else spec.tier) == self.occupied_tier]
        if self.default_tier == self.occupied_tier:
            used.insert(0, "default_tier")
        if used:
            raise ValueError(f"occupied_tier: tier {self.occupied_tier} is also used by "
                             f"{', '.join(used)}; "
                             "set occupied_tier to a tier number nothing else uses (it holds "
                             "the GPUs of pods never evicted)")
        return self

    def plan_age_limit_s(self) -> float:
        """The oldest plan 'k8s apply' applies without --force, in seconds."""
        return self.max_plan_age_s if self.max_plan_age_s is not None else 2 * self.interval_s

    def checkpoint_defaults(self, namespace: str, priority_class: str | None) -> dict[str, Any]:
        """The checkpoint fields a job starts from before its annotations: ``signal``
        null unless the config says otherwise, then ``job_defaults``, the namespace's
        override, the PriorityClass's override (later ones win, field by field)."""
        out: dict[str, Any] = {"signal": None}
        out.update(self.job_defaults.checkpoint.given())
        for layer in (self.job_defaults_by_namespace.get(namespace),
                      self.job_defaults_by_priority_class.get(priority_class or "")):
            if layer is not None:
                out.update(layer.checkpoint.given())
        return out

    def signal_configured(self, namespace: str, priority_class: str | None) -> bool:
        """Whether the config states a checkpoint signal for such a job (null counts:
        it is a statement too), rather than leaving the safe default."""
        layers = (self.job_defaults, self.job_defaults_by_namespace.get(namespace),
                  self.job_defaults_by_priority_class.get(priority_class or ""))
        return any(x is not None and "signal" in x.checkpoint.model_fields_set for x in layers)

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
            msgs.append(f"config.{loc}: {msg}" if loc else f"config.{msg}")
        raise InputError(msgs, name) from None
