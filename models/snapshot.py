"""Snapshot records of the contract (section 2) with field-level validation.

Cross-record checks (unknown node, shared GPU, ...) live in ``models.load``, so
that every error of an input is reported at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

from models.policy import (
    MAX_COUNT,
    MAX_GB,
    MAX_GB_PER_S,
    MAX_NODES,
    MAX_PRIORITY,
    MAX_SECONDS,
    MIN_GB_PER_S,
    Policy,
    Record,
)

# Implementation limits for times (docs/format.md, "Limits"): room for every hold
# and duration (at most MAX_SECONDS) on either side
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


# Checked by pydantic-core (no Python call per timestamp or priority); what it
# reports differently is worded by time_message and priority_message
Time = Annotated[AwareDatetime, Field(ge=EARLIEST, lt=LATEST)]
_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)


def is_time_bound(ctx: dict[str, Any] | None) -> bool:
    """Whether a range error's context (``ge`` or ``lt``) is a Time's limit."""
    bound = (ctx or {}).get("ge", (ctx or {}).get("lt"))
    if not isinstance(bound, str | datetime):
        return False
    try:
        return _DATETIME.validate_python(bound) in (EARLIEST, LATEST)
    except ValidationError:
        return False


def time_message(value: Any) -> str:
    """The message for a Time out of range (``value``: the input refused). A naive
    time is refused for that, in range or not (pydantic-core checks the range
    first)."""
    t = _DATETIME.validate_python(value)
    if t.tzinfo is None:
        return "Input should have timezone info"
    return f"{t.isoformat()} is outside 1970-01-01 to 9000-01-01"


# A priority: any finite number within +-MAX_PRIORITY; an integer stays one (the
# planner scales fractions to integers exactly, models.rules.priority_scale)
_PRIORITY_RANGE = Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)
Priority = Annotated[Annotated[int, Strict(), _PRIORITY_RANGE]
                     | Annotated[float, Strict(), _PRIORITY_RANGE],
                     WithJsonSchema({"type": "number", "minimum": -MAX_PRIORITY,
                                     "maximum": MAX_PRIORITY})]
# the names pydantic gives the branches of Priority's union in an error's location
PRIORITY_BRANCHES = ("constrained-int", "constrained-float")


def priority_message(value: Any) -> str:
    """One message for a priority both branches of Priority's union refused, as for
    one type: any finite number within +-MAX_PRIORITY."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "Input should be a valid number"
    if isinstance(value, float) and not math.isfinite(value):
        return "Input should be a finite number"
    if value > MAX_PRIORITY:
        return f"Input should be less than or equal to {MAX_PRIORITY}"
    return f"Input should be greater than or equal to {-MAX_PRIORITY}"


NodeState = Literal["up", "drain", "down"]
JobState = Literal["running", "pending"]
Topology = Literal["nvlink", "any"]


class Storage(Record):
    id: str = Field(min_length=1)
    write_gb_per_s: float = Field(ge=MIN_GB_PER_S, le=MAX_GB_PER_S, strict=True)


class NvlinkEdges(Record):
    edges: list[tuple[Annotated[int, Strict()], Annotated[int, Strict()]]]


NvlinkSpec = Literal["nvswitch", "none"] | list[list[int]] | NvlinkEdges


class Node(Record):
    id: str = Field(min_length=1)
    gpus: int = Field(ge=1, le=1024, strict=True)
    gpu_type: str | None = None
    nvlink: NvlinkSpec = "nvswitch"
    pool: str = "default"
    block: str | None = None
    nvlink_domain: str | None = None
    storage: str | None = None
    local_write_gb_per_s: float | None = Field(None, ge=MIN_GB_PER_S, le=MAX_GB_PER_S, strict=True)
    state: NodeState = "up"

    def nvlink_raw(self) -> Any:
        """The ``nvlink`` value in its contract JSON form (for planner.core.topology)."""
        if isinstance(self.nvlink, NvlinkEdges):
            return {"edges": [list(e) for e in self.nvlink.edges]}
        return self.nvlink


class Checkpoint(Record):
    size_gb: float = Field(0, ge=0, le=MAX_GB, strict=True)
    signal: str | None = "SIGTERM"
    barrier_s: float = Field(0, ge=0, le=MAX_SECONDS, strict=True)
    cleanup_s: float = Field(0, ge=0, le=MAX_SECONDS, strict=True)
    restore_s: float = Field(0, ge=0, le=MAX_SECONDS, strict=True)
    last_at: Time | None = None


class PlacementPart(Record):
    node: str = Field(min_length=1)
    gpus: list[Annotated[int, Strict()]]

    @field_validator("gpus")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"GPU indices {v} are not distinct")
        if v and min(v) < 0:
            raise ValueError(f"GPU indices {v} must not be negative")
        return v


class Job(Record):
    id: str = Field(min_length=1)
    tier: int = Field(strict=True)
    state: JobState
    gpus_per_node: int = Field(ge=1, le=1024, strict=True)
    priority: Priority = 0
    team: str | None = None
    nodes: int = Field(1, ge=1, le=MAX_NODES, strict=True)
    gpu_type: str | None = None
    topology: Topology = "nvlink"
    same_block: bool = Field(False, strict=True)
    same_nvlink_domain: bool = Field(False, strict=True)
    started_at: Time | None = None
    submitted_at: Time | None = None
    placement: list[PlacementPart] | None = None
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    preemptions: int = Field(0, ge=0, le=MAX_COUNT, strict=True)
    last_preempted_at: Time | None = None
    # section 9: when a running job will have ended at the latest, by a limit the
    # scheduler enforces (Slurm's EndTime, Kubernetes activeDeadlineSeconds); R17
    expected_end_at: Time | None = None

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def queue_start(self) -> datetime | None:
        """R16: the later of ``submitted_at`` and ``last_preempted_at`` (None when
        neither is known: the job counts as having waited long enough)."""
        known = [t for t in (self.submitted_at, self.last_preempted_at) if t is not None]
        return max(known) if known else None


class RecentEviction(Record):
    """Section 9: an eviction carried out before ``now`` by whoever runs the ticks (R15)."""

    job: str = Field(min_length=1)
    at: Time
    gpus: int | None = Field(None, ge=0, le=MAX_COUNT, strict=True)


class Snapshot(Record):
    version: Literal[1] = Field(description="contract version: 1 (required)")
    now: Time
    storage: list[Storage] = Field(default_factory=list)
    nodes: list[Node] = Field(default_factory=list)
    jobs: list[Job] = Field(default_factory=list)
    policy: Policy = Field(default_factory=Policy)
    recent_evictions: list[RecentEviction] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list, description=(
        "what the tool that wrote the snapshot had to assume or could not tell; "
        "copied to the front of the plan's warnings"))
    comment: str | None = Field(None, description="free text; `_comment` in files")

    # ---- lookups (built once; the record is frozen so they never go stale, and a
    # copy with changes makes its own: model_copy) ----
    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> Snapshot:
        """pydantic's copy, without the lookups worked out for this snapshot when
        ``update`` changes fields (they are made again from the copy's own)."""
        out = super().model_copy(update=update, deep=deep)
        if update:
            for name in _LOOKUPS:
                out.__dict__.pop(name, None)
        return out

    @cached_property
    def _nodes_by_id(self) -> dict[str, Node]:
        return {n.id: n for n in self.nodes}

    @cached_property
    def _storage_by_id(self) -> dict[str, Storage]:
        return {s.id: s for s in self.storage}

    @cached_property
    def _jobs_by_id(self) -> dict[str, Job]:
        return {j.id: j for j in self.jobs}

    def node_map(self) -> dict[str, Node]:
        return self._nodes_by_id

    def storage_map(self) -> dict[str, Storage]:
        return self._storage_by_id

    def job_map(self) -> dict[str, Job]:
        return self._jobs_by_id

    def storage_of(self, node: Node) -> Storage | None:
        """A node's storage target (section 2 defaults: the only one when unset)."""
        if node.storage is not None:
            return self.storage_map().get(node.storage)
        return self.storage[0] if len(self.storage) == 1 else None

    @cached_property
    def _by_state(self) -> tuple[tuple[Job, ...], tuple[Job, ...], bool]:
        # the running and pending jobs, and whether every priority is an int (one pass)
        running: list[Job] = []
        pending: list[Job] = []
        whole = True
        for j in self.jobs:
            (running if j.state == "running" else pending).append(j)
            if whole and not isinstance(j.priority, int):
                whole = False
        return tuple(running), tuple(pending), whole

    def integer_priorities(self) -> bool:
        """Is every job's priority an int (not a float such as 2.5 or 10.0)?"""
        return self._by_state[2]

    def running(self) -> list[Job]:
        """The running jobs, in the snapshot's order (a new list each call)."""
        return list(self._by_state[0])

    def pending(self) -> list[Job]:
        """The pending jobs, in the snapshot's order (a new list each call)."""
        return list(self._by_state[1])

    def replace(self, **changes: Any) -> Snapshot:
        """A copy with some fields changed (validated again)."""
        data = self.model_dump(mode="json", by_alias=True)
        data.update({k: (v.model_dump(mode="json") if hasattr(v, "model_dump") else v)
                     for k, v in changes.items()})
        return Snapshot.model_validate(data)


def age_s(now: datetime, then: datetime | None) -> float:
    """Seconds from ``then`` to ``now`` (0 when then is None)."""
    return 0.0 if then is None else (now - then).total_seconds()


# Snapshot's lookups (cached properties), which a copy with changes drops
_LOOKUPS = tuple(name for name, v in vars(Snapshot).items() if isinstance(v, cached_property))
