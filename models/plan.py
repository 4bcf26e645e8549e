"""Plan records of the contract (section 6)."""

from __future__ import annotations

from datetime import UTC
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
)

from models.policy import MAX_SECONDS
from models.snapshot import PlacementPart

# a plan read back (slurm apply, k8s apply, verify) is checked like a snapshot:
# durations from 0 to MAX_SECONDS, amounts not negative (NaN and infinities are
# refused by load_plan)

PlanStatus = Literal["optimal", "feasible", "fallback"]
Reason = Literal["COOLDOWN", "CASCADE_GUARD", "NO_FIT", "PROTECTED", "STORM", "BUDGET",
                 "OUTRANKED", "THRASH_BUDGET", "PATIENCE", "ENDING_SOON"]
REASONS: tuple[str, ...] = ("COOLDOWN", "CASCADE_GUARD", "NO_FIT", "PROTECTED", "STORM",
                            "BUDGET", "OUTRANKED", "THRASH_BUDGET", "PATIENCE", "ENDING_SOON")


def _iso(dt: AwareDatetime | None) -> str | None:
    if dt is None:
        return None

    s = dt.astimezone(UTC).isoformat()
    return s.replace("+00:00", "Z")


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Objective(_Out):
    admitted_gpus: dict[str, int] = Field(default_factory=dict)
    priority_value: int | float = 0  # a float only for fractional priorities
    eviction_cost_gpu_s: float = 0.0
    evictions: int = 0
    # an extension (policy thrash.past_budget_gpu_s): victims past what R15's window
    # has left, all exempt; written only when not 0 (0 when the policy item is off)
    evictions_past_budget: int = 0
    # what each of them costs (thrash.past_budget_gpu_s), set by objective_of
    _past_gpu_s: float = PrivateAttr(0.0)

    @model_serializer(mode="wrap")
    def _ser(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if not out.get("evictions_past_budget"):
            out.pop("evictions_past_budget", None)
        return out

    def __eq__(self, other: object) -> bool:  # (the fields; not the weight set aside)
        if not isinstance(other, Objective):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]

    def with_past_cost(self, gpu_s: float) -> Objective:
        """This objective, its victims past the budget costing ``gpu_s`` each."""
        self._past_gpu_s = gpu_s
        return self

    def planned_cost(self) -> float:
        """Item 4 as the planners minimise it: the eviction cost, plus the cost of the
        victims past the rolling budget (``thrash.past_budget_gpu_s``)."""
        return self.eviction_cost_gpu_s + self._past_gpu_s * self.evictions_past_budget

    def key(self) -> tuple[float, ...]:
        """Lexicographic key, larger is better (items 1-5 of the objective; item 4 as
        :meth:`planned_cost`)."""
        tiers = sorted(self.admitted_gpus, key=int)
        return (*[self.admitted_gpus[t] for t in tiers], self.priority_value,
                -round(self.planned_cost(), 6), -self.evictions)


class Eviction(_Out):
    job: str
    tier: int
    preemptors: list[str]
    signal: str | None
    grace_s: float = Field(ge=0, le=MAX_SECONDS)
    flush_s: float = Field(ge=0, le=MAX_SECONDS)
    cost_gpu_s: float = Field(ge=0)
    requeue_hold_until: AwareDatetime

    @field_serializer("requeue_hold_until")
    def _ser(self, v: AwareDatetime) -> str | None:
        return _iso(v)


class Placement(_Out):
    job: str
    placement: list[PlacementPart]
    start_after_s: float = Field(0, ge=0, le=MAX_SECONDS)


class Deferred(_Out):
    job: str
    reason: Reason
    until: AwareDatetime | None = None
    detail: str = ""

    @field_serializer("until")
    def _ser(self, v: AwareDatetime | None) -> str | None:
        return _iso(v)


class StormLoad(_Out):
    storage: str
    flush_gb: float
    flush_s: float


class SolverInfo(_Out):
    engine: str
    status: str
    wall_s: float = 0.0
    gap: float | None = Field(None, description=(
        "proven relative gap at the first objective item not proven optimal (the whole "
        "CP-SAT model unpruned; where it was skipped, a relaxation solved on the other "
        "core, solver status RELAXATION, or on the tier items alone where a second "
        "lane ran there or the relaxation would not fit, or on the first tier's GPUs "
        "from the packing of its gangs; or the relaxation of plan --bound)"))
    bound: float | None = Field(None, description=(
        "proven lower bound on the planned eviction cost (with "
        "thrash.past_budget_gpu_s) among plans that admit at least what this plan "
        "admits (CP-SAT only)"))
    detail: str | None = None
    # the objective item ``gap`` is at, where the planner knows it (plan --bound then
    # keeps the more telling of its gap and the relaxation's: a later item, or the
    # same one closer); not written
    _gap_item: str | None = PrivateAttr(None)

    @property
    def gap_item(self) -> str | None:
        """The objective item ``gap`` is at ("tier-2 GPUs", ...), where the planner
        named it (:meth:`name_gap_item`); not part of the written plan."""
        return self._gap_item

    def name_gap_item(self, item: str | None) -> None:
        """Say which objective item ``gap`` is at."""
        self._gap_item = item


class Plan(_Out):
    version: Literal[1] = 1
    now: AwareDatetime
    status: PlanStatus
    objective: Objective
    evictions: list[Eviction] = Field(default_factory=list)
    placements: list[Placement] = Field(default_factory=list)
    deferred: list[Deferred] = Field(default_factory=list)
    storm: list[StormLoad] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    solver: SolverInfo

    @field_serializer("now")
    def _ser(self, v: AwareDatetime) -> str | None:
        return _iso(v)

    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)
