"""Pieces of hand-written test snapshots shared by several test files."""

from __future__ import annotations

import random
from typing import Any

OLD = "2026-11-30T04:00:00Z"  # 4 h before the tests' NOW: past every tier's min runtime


def whole_node_holder(i: int, size: float, barrier: float, restore: float) -> dict[str, Any]:
    """Running tier-3 job ``w{i}`` on all 8 GPUs of node ``n{i}``, started at OLD,
    priority 1, with a ``size`` GB checkpoint (signal, ``barrier`` s, no cleanup,
    ``restore`` s)."""
    return {"id": f"w{i}", "tier": 3, "state": "running", "gpus_per_node": 8,
            "priority": 1, "started_at": OLD, "topology": "any",
            "checkpoint": {"size_gb": size, "signal": "SIGTERM", "barrier_s": barrier,
                           "cleanup_s": 0, "restore_s": restore},
            "placement": [{"node": f"n{i}", "gpus": list(range(8))}]}


def random_tick(r: random.Random, case: int, pending: tuple[int, ...] = (5, 8, 12)
                ) -> dict[str, Any]:
    """A generated tick drawn with ``r``: 4-12 nodes of 4 or 8 GPUs, ``pending`` jobs
    (one of), 70-95% occupied, gangs, pools; seed ``case``."""
    from planner.sim.generate import generate

    return generate(nodes=r.choice([4, 6, 8, 12]), pending=r.choice(pending), seed=case,
                    occupancy=r.choice([0.7, 0.85, 0.95]),
                    multinode_share=r.choice([0.0, 0.15, 0.3]), pools=r.random() < 0.3,
                    gpus_per_node=r.choice([8, 8, 4]))


def random_policy(r: random.Random) -> dict[str, Any]:
    """A random policy: R15 off, under exempt_if any or all, with or without exempt
    tiers, the swap, a GPU limit and prices past the budget; R13's budgets; a short
    grace (R11/R12 bind); a cascade guard (R10); tier-2 patience (R16)."""
    pol: dict[str, Any] = {}
    if r.random() < 0.15:
        pol["thrash"] = None
    else:
        th: dict[str, Any] = {"exempt_free_first": r.random() < 0.5,
                              "past_budget_gpu_s": r.choice([0.0, 600.0, 1800.0])}
        if r.random() < 0.3:
            th["exempt_if"] = "any"
        if r.random() < 0.2:
            th["exempt_tiers"] = []
        if r.random() < 0.5:
            th["min_evictions"] = r.randint(0, 3)
            th["max_fraction"] = r.choice([0.0, 0.05, 0.1])
        if r.random() < 0.5:
            th["min_gpus"] = r.randint(0, 16)
            th["max_gpu_fraction"] = r.choice([None, 0.0, 0.05, 0.2])
        pol["thrash"] = th
    if r.random() < 0.3:
        pol["max_evictions_per_tick"] = r.randint(0, 4)
    if r.random() < 0.3:
        pol["max_evicted_gpu_fraction"] = r.choice([0.05, 0.1, 0.3])
    if r.random() < 0.3:
        pol["grace"] = {"min_s": 10, "max_s": r.choice([30, 60, 120])}
    if r.random() < 0.3:
        pol["cascade_guard_s"] = r.choice([60, 600])
    if r.random() < 0.3:
        pol["tiers"] = {"2": {"preempt_after_s": r.choice([60, 600, 3600])}}
    return pol
