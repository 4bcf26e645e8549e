"""Planners behind one interface: ``get_baseline(name)(problem).solve() -> Decision``.

``greedy`` is our own heuristic (planner/heuristics/greedy.py); ``k8s`` and ``slurm`` imitate
how Kubernetes' default preemption and Slurm's preempt/partition_prio pick victims,
for comparisons. All of them respect every rule of the contract (the plan is
verified like any other); they differ only in how they choose.
"""

from __future__ import annotations

from planner.heuristics.baseline_k8s import K8sPlanner
from planner.heuristics.baseline_slurm import SlurmPlanner
from planner.heuristics.greedy import GreedyPlanner


def get_baseline(name: str) -> type[GreedyPlanner]:
    """The planner class called ``name`` ("greedy", "k8s" or "slurm")."""
    if name == "greedy":
        return GreedyPlanner
    if name == "k8s":
        return K8sPlanner
    if name == "slurm":
        return SlurmPlanner
    raise ValueError(f"unknown planner {name!r}")
