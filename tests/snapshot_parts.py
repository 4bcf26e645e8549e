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


def gang_tick(now: str) -> dict[str, Any]:
    """Five free 8-GPU NVSwitch nodes but n1 and n2, held by tier-2 jobs r1 and r2
    (started at OLD, restore 100 s: 800 GPU-s each); pending: tier-1 gang g (2 x 8
    GPUs) and tier-3 job low (8 GPUs), priority 10, any GPUs. The greedy variant that
    spares free GPUs for less important pending jobs puts g on n1 and n2, evicting r1
    and r2, and low on n3: 16/0/8 GPUs at 1,600 GPU-s; the plain greedy plan puts g
    and low on free nodes: 16/0/8 at 0 GPU-s."""
    def running(jid: str, node: str) -> dict[str, Any]:
        return {"id": jid, "tier": 2, "state": "running", "gpus_per_node": 8, "nodes": 1,
                "started_at": OLD, "checkpoint": {"restore_s": 100},
                "placement": [{"node": node, "gpus": list(range(8))}]}

    def pending(jid: str, tier: int, nodes: int) -> dict[str, Any]:
        return {"id": jid, "tier": tier, "state": "pending", "gpus_per_node": 8,
                "nodes": nodes, "priority": 10, "topology": "any"}

    return {"version": 1, "now": now, "storage": [],
            "nodes": [{"id": f"n{i}", "gpus": 8, "block": "b1", "nvlink": "nvswitch"}
                      for i in range(1, 6)],
            "jobs": [running("r1", "n1"), running("r2", "n2"), pending("g", 1, 2),
                     pending("low", 3, 1)],
            "policy": {}}


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
