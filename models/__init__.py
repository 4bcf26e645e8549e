"""Data contract of preempt-planner (``shared/spec/format-v1.md``), as pydantic v2
records. No solver imports: the planner, verifier, simulator and adapters build
on these."""

from models.load import (
    MAX_SEED,
    SHAPE_ERRORS,
    InputError,
    check_snapshot,
    did_you_mean,
    load_plan,
    load_policy,
    load_snapshot,
    range_problems,
    read_document,
    suggest_fields,
)
from models.plan import (
    REASONS,
    Deferred,
    Eviction,
    Objective,
    Placement,
    Plan,
    SolverInfo,
    StormLoad,
)
from models.policy import Backoff, Grace, Policy, Thrash, TierPolicy, Window
from models.snapshot import (
    Checkpoint,
    Job,
    Node,
    PlacementPart,
    RecentEviction,
    Snapshot,
    Storage,
)

__all__ = [
    "MAX_SEED", "REASONS", "SHAPE_ERRORS", "Backoff", "Checkpoint", "Deferred", "Eviction", "Grace", "InputError", "Job",
    "Node", "Objective", "Placement", "PlacementPart", "Plan", "Policy", "RecentEviction", "Snapshot",
    "SolverInfo", "Storage", "StormLoad", "Thrash", "TierPolicy", "Window", "check_snapshot", "did_you_mean",
    "load_plan",
    "load_policy", "load_snapshot", "range_problems", "read_document", "suggest_fields",
]
