"""``preempt-planner slurm snapshot|apply|run`` (implemented in planner/slurm)."""

from planner.slurm.commands import register

__all__ = ["register"]
