"""Configuration of the Slurm adapter: what Slurm does not know.

Slurm knows jobs, nodes, partitions, QOS and GPU indices. The planner also needs
tiers, NVLink layout, pools, blocks, storage targets and bandwidths, and the
policy; this file supplies them. YAML or JSON; relative paths are relative to
the file. Every field is optional. See ``docs/slurm.md`` for a commented example.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from planner.adapters.checkpoint import CheckpointDefaultsBase
from planner.adapters.slurm.hostlist import MAX_HOSTS, HostlistError, HostlistTooLarge, count
from planner.adapters.slurm.scalars import normalize_signal

CONFIG_ENV = "PREEMPT_PLANNER_SLURM_CONFIG"
"""Environment variable naming the config file when ``--config`` is not given."""


class ConfigError(ValueError):
    """The adapter configuration is unreadable or invalid."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TierMap(_Strict):
    """Which Slurm jobs the planner manages, and in which tier.

    A job's tier comes from its QOS (``qos``), else from its partition
    (``partitions``; for a pending job submitted to several partitions the most
    important mapped tier wins), else from its account (``accounts``), else
    ``default``. Jobs left without a tier are not planned; if they run on GPUs
    they still occupy them and enter the snapshot in tier ``unmanaged`` (not
    preemptible, added to the policy), as do running jobs Slurm cannot requeue
    (array tasks, heterogeneous jobs, ``--no-requeue``, salloc/srun). No mapping,
    ``default`` or ``policy.tiers`` entry may use the unmanaged tier
    (:meth:`SlurmConfig.unmanaged_collisions`).
    """

    partitions: dict[str, int] = Field(default_factory=dict)
    qos: dict[str, int] = Field(default_factory=dict)
    accounts: dict[str, int] = Field(default_factory=dict)
    default: int | None = None
    unmanaged: int = 9

    def maps_any(self) -> bool:
        """True when at least one job could get a tier (a mapping or a default)."""
        return bool(self.partitions or self.qos or self.accounts) or self.default is not None

    def assigned(self) -> list[tuple[str, int]]:
        """(``tiers.partitions.<name>``, ... or ``tiers.default``, tier) of every
        mapping and the default."""
        out = [(f"tiers.{kind}.{name}", t) for kind, mapping in
               (("partitions", self.partitions), ("qos", self.qos), ("accounts", self.accounts))
               for name, t in mapping.items()]
        return out + ([("tiers.default", self.default)] if self.default is not None else [])

    def uses_of(self, tier: int) -> list[str]:
        """The mappings (``tiers.partitions.<name>``, ...) and ``tiers.default`` that
        give `tier`."""
        return [where for where, t in self.assigned() if t == tier]


class NodeRule(_Strict):
    """Contract node fields for the nodes a rule matches; later rules win.

    ``match`` is a Slurm hostlist expression (``gpu[1-4]``) or a glob
    (``dgx-*``); ``partitions`` (optional) restricts the rule to nodes in one of
    these partitions.
    """

    match: str = "*"
    partitions: list[str] | None = None
    gpu_type: str | None = None
    nvlink: Any = None
    pool: str | None = None
    block: str | None = None
    nvlink_domain: str | None = None
    storage: str | None = None
    local_write_gb_per_s: float | None = Field(default=None, gt=0)
    state: Literal["up", "drain", "down"] | None = None

    @field_validator("match")
    @classmethod
    def _not_too_many(cls, v: str) -> str:
        try:
            count(v)  # (from the ranges: nothing is expanded)
        except HostlistTooLarge as exc:
            raise ValueError(f"{exc}; a rule's hostlist may name at most {MAX_HOSTS:,} nodes "
                             "(a glob such as 'gpu*' matches any number)") from None
        except HostlistError:
            pass  # (not a hostlist: matched as a glob)
        return v


CHECKPOINT_BASE: dict[str, Any] = {
    "size_gb": 0.0, "signal": None, "barrier_s": 0.0, "cleanup_s": 0.0, "restore_s": 0.0}
"""The checkpoint of a job that nothing describes: no known trap (``signal`` null),
so an eviction is priced as losing its work since start (contract objective item 4)."""


class CheckpointDefaults(CheckpointDefaultsBase):
    """Checkpoint fields of a job whose comment and sidecar do not give them. Only
    the fields written in the config count (over :data:`CHECKPOINT_BASE`): an
    override for a partition, QOS or account changes those and keeps the others."""

    @field_validator("signal", mode="before")
    @classmethod
    def _signal(cls, v: Any) -> Any:
        """The signal as a comment's is read (``TERM``, ``SIGUSR1``, ``15``; ``none``:
        no known trap), so a name scancel would refuse is refused here, not at the
        first eviction."""
        if isinstance(v, bool) or not isinstance(v, str | int):
            return v  # (null, or the type check says what is wrong)
        try:
            return normalize_signal(v)
        except ValueError as exc:
            raise ValueError(f"{exc} (a name such as TERM or SIGUSR1, or its number such as "
                             "15; null: the jobs trap no signal)") from None


class JobDefaults(_Strict):
    topology: Literal["nvlink", "any"] = "nvlink"
    checkpoint: CheckpointDefaults = Field(default_factory=CheckpointDefaults)


class JobDefaultsOverride(_Strict):
    """``job_defaults`` for the jobs of one partition, QOS or account."""

    checkpoint: CheckpointDefaults = Field(default_factory=CheckpointDefaults)


class PlannerSettings(_Strict):
    time_limit_s: float = Field(default=1.0, gt=0)
    workers: int = Field(default=2, ge=1)
    deterministic: bool = False
    planner: str = "cpsat"


class Commands(_Strict):
    """Slurm client executables (names looked up on PATH, or absolute paths)."""

    squeue: str = "squeue"
    sinfo: str = "sinfo"
    scontrol: str = "scontrol"
    scancel: str = "scancel"

    @field_validator("squeue", "sinfo", "scontrol", "scancel")
    @classmethod
    def _plain(cls, v: str) -> str:
        if not v or any(c.isspace() for c in v) or v.startswith("-"):
            raise ValueError("must be one executable name or path, without arguments")
        return v


class SlurmConfig(_Strict):
    tiers: TierMap = Field(default_factory=TierMap)
    nodes: list[NodeRule] = Field(default_factory=list)
    storage: list[dict[str, Any]] = Field(default_factory=list)
    policy: dict[str, Any] | None = None
    policy_file: Path | None = None
    gpu_types: dict[str, str] = Field(
        default_factory=dict, description="Slurm GRES type -> contract gpu_type")
    # checkpoint defaults of jobs whose comment and sidecar are silent: signal null
    # (no known trap), so an eviction loses the work since start; overrides per
    # account, then partition, then QOS (the order of `tiers`, the most specific
    # last), then the comment and the sidecar win, field by field
    job_defaults: JobDefaults = Field(default_factory=JobDefaults)
    job_defaults_by_account: dict[str, JobDefaultsOverride] = Field(default_factory=dict)
    job_defaults_by_partition: dict[str, JobDefaultsOverride] = Field(default_factory=dict)
    job_defaults_by_qos: dict[str, JobDefaultsOverride] = Field(default_factory=dict)
    sidecar_dir: Path | None = None
    state_file: Path | None = None
    plan_dir: Path | None = None
    signal_target: Literal["batch", "full"] = "batch"
    poll_interval_s: float = Field(default=1.0, gt=0)
    command_timeout_s: float = Field(default=30.0, gt=0)
    interval_s: float = Field(default=30.0, gt=0)
    max_plan_age_s: float | None = Field(
        default=None, gt=0, description="`slurm apply` refuses an older plan (its `now` to "
                                        "this host's clock); null: 2 x interval_s")
    node_source: Literal["auto", "sinfo", "scontrol"] = "auto"
    commands: Commands = Field(default_factory=Commands)
    planner: PlannerSettings = Field(default_factory=PlannerSettings)

    @model_validator(mode="after")
    def _unmanaged_tier_apart(self) -> SlurmConfig:
        problem = unmanaged_problem(self.unmanaged_collisions(), self.tiers.unmanaged)
        if problem:
            raise ValueError(problem)
        return self

    def unmanaged_collisions(self, policy_tiers: Any = None,
                             where: str = "policy.tiers") -> list[str]:
        """What else uses the unmanaged tier: mappings, ``tiers.default`` and the
        keys of ``policy.tiers`` (or of `policy_tiers`, named `where`). The
        unmanaged tier holds GPUs the planner must never take (unmapped jobs, jobs
        Slurm cannot requeue): a job mapped to it, or a policy that makes it
        preemptible, would turn them into victims."""
        tier = self.tiers.unmanaged
        out = self.tiers.uses_of(tier)
        if policy_tiers is None:
            policy_tiers = (self.policy or {}).get("tiers")
        if isinstance(policy_tiers, dict):
            out += [f"{where}.{k}" for k in policy_tiers if _tier_number(k) == tier]
        return out

    def resolved(self, base: Path) -> SlurmConfig:
        """A copy whose relative paths are taken relative to `base`."""
        changes: dict[str, Any] = {}
        for name in ("policy_file", "sidecar_dir", "state_file", "plan_dir"):
            value = getattr(self, name)
            if value is not None and not Path(value).is_absolute():
                changes[name] = base / value
        return self.model_copy(update=changes)

    def plan_age_limit_s(self) -> float:
        """The oldest plan `slurm apply` carries out without ``--force``."""
        return self.max_plan_age_s if self.max_plan_age_s is not None else 2 * self.interval_s

    def _checkpoint_layers(self, partitions: Sequence[str], qos: str | None,
                           account: str | None) -> list[CheckpointDefaults]:
        """``job_defaults`` and the overrides that apply to a job, later ones winning:
        its account's, its partition's (the first of several that has one), its QOS's."""
        part = next((self.job_defaults_by_partition[p] for p in partitions
                     if p in self.job_defaults_by_partition), None)
        layers = [self.job_defaults.checkpoint]
        for o in (self.job_defaults_by_account.get(account or ""), part,
                  self.job_defaults_by_qos.get(qos or "")):
            if o is not None:
                layers.append(o.checkpoint)
        return layers

    def checkpoint_defaults(self, partitions: Sequence[str], qos: str | None,
                            account: str | None) -> dict[str, Any]:
        """The checkpoint a job starts from before its comment and sidecar:
        :data:`CHECKPOINT_BASE` (``signal`` null: no known trap), then
        ``job_defaults``, the account's, partition's and QOS's overrides, field by
        field."""
        out = dict(CHECKPOINT_BASE)
        for layer in self._checkpoint_layers(partitions, qos, account):
            out.update(layer.given())
        return out

    def signal_configured(self, partitions: Sequence[str], qos: str | None,
                          account: str | None) -> bool:
        """Whether the config states a checkpoint signal for such a job (null counts:
        it is a statement too), rather than leaving the safe default."""
        return any("signal" in layer.model_fields_set
                   for layer in self._checkpoint_layers(partitions, qos, account))

    def policy_dict(self) -> dict[str, Any]:
        """The contract policy: ``policy`` merged over the ``policy_file``."""
        data: dict[str, Any] = {}
        if self.policy_file is not None:
            data = _read_document(Path(self.policy_file), "policy_file")
            data = data.get("policy", data)  # a snapshot file also works
            if not isinstance(data, dict):
                raise ConfigError(f"policy_file {self.policy_file}: its policy must be a "
                                  f"mapping, not {type(data).__name__}")
            data = dict(data)
            # (the file's tiers count unless `policy` replaces them)
            file_tiers = None if "tiers" in (self.policy or {}) else data.get("tiers")
            collisions = self.unmanaged_collisions(file_tiers,
                                                   f"policy_file {self.policy_file}: tiers")
            problem = unmanaged_problem(collisions, self.tiers.unmanaged)
            if problem:
                raise ConfigError(problem)
        if self.policy:
            data.update(self.policy)
        return data


_TIER_KEY = TypeAdapter(int)


def _tier_number(key: Any) -> int | None:
    """A ``policy.tiers`` key as the policy reads it (``'09'``, ``' 9'`` and ``9.0`` are
    tier 9); None when it is no tier number (the policy's own check says so)."""
    try:
        return int(_TIER_KEY.validate_python(key))
    except ValidationError:
        return None


def unmanaged_problem(collisions: list[str], tier: int) -> str | None:
    """The refusal of an unmanaged tier that `collisions` also use; None if none."""
    if not collisions:
        return None
    return (f"tiers.unmanaged: tier {tier} is also used by {', '.join(collisions)}; the "
            "unmanaged tier holds the GPUs of jobs the planner must never evict (jobs no "
            "mapping covers, array tasks, jobs Slurm cannot requeue), in a tier the adapter "
            "makes non-preemptible, so no mapping, default or policy tier may use it: set "
            "tiers.unmanaged to a tier number nothing else uses")


def _read_document(path: Path, field: str = "") -> dict[str, Any]:
    """A config or policy file (JSON or YAML) read as every input is
    (:func:`models.read_document`: UTF-8, at most 1 GiB, nested at most 64 levels, no
    YAML alias bomb); ConfigError naming the file (and the `field` that names it)
    and what is wrong."""
    from models import InputError, read_document

    name = f"{field} {path}" if field else str(path)
    try:
        data = read_document(path)
    except InputError as exc:
        raise ConfigError(f"{name}: {'; '.join(exc.errors)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: must hold a mapping, not {type(data).__name__}")
    return data


def config_from_dict(data: dict[str, Any], base: Path | None = None,
                     source: str = "config") -> SlurmConfig:
    try:
        cfg = SlurmConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: " + "; ".join(error_lines(exc))) from exc
    return cfg.resolved(base) if base is not None else cfg


def error_lines(exc: ValidationError) -> list[str]:
    """One ``field.path: message`` line per error of a config's validation (a check of
    the whole config, with no field path, says its own field)."""
    out = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e["loc"])
        msg = str(e["msg"]).removeprefix("Value error, ")
        out.append(f"{where}: {msg}" if where else msg)
    return out


def load_config(path: str | Path | None = None) -> SlurmConfig:
    """Read the config from `path`, else from $PREEMPT_PLANNER_SLURM_CONFIG, else defaults."""
    if path is None:
        path = os.environ.get(CONFIG_ENV) or None
    if path is None:
        return SlurmConfig()
    p = Path(path)
    return config_from_dict(_read_document(p), base=p.resolve().parent, source=str(p))
