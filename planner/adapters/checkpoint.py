"""Checkpoint defaults shared by the Slurm and Kubernetes adapter configs: the
contract's ``checkpoint`` fields (without ``last_at``) for jobs whose own
description (a Slurm comment or sidecar, pod annotations) does not give them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from models.policy import MAX_GB, MAX_SECONDS

CHECKPOINT_FIELDS = ("size_gb", "signal", "barrier_s", "cleanup_s", "restore_s")
NUMBER_FIELDS = ("size_gb", "barrier_s", "cleanup_s", "restore_s")


class CheckpointDefaultsBase(BaseModel):
    """Only the fields written in the config count: an override (for a partition,
    QOS, account, namespace or PriorityClass) changes those and keeps the others."""

    model_config = ConfigDict(extra="forbid")

    size_gb: float | None = Field(default=None, ge=0, le=MAX_GB)
    signal: str | None = None
    barrier_s: float | None = Field(default=None, ge=0, le=MAX_SECONDS)
    cleanup_s: float | None = Field(default=None, ge=0, le=MAX_SECONDS)
    restore_s: float | None = Field(default=None, ge=0, le=MAX_SECONDS)

    @model_validator(mode="after")
    def _numbers(self) -> CheckpointDefaultsBase:
        for f in NUMBER_FIELDS:
            if f in self.model_fields_set and getattr(self, f) is None:
                raise ValueError(f"{f}: must be a number >= 0, not null")
        return self

    def given(self) -> dict[str, Any]:
        """The fields written in the config (``signal: null`` included)."""
        return {f: getattr(self, f) for f in CHECKPOINT_FIELDS if f in self.model_fields_set}
