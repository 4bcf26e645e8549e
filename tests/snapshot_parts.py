"""Pieces of hand-written test snapshots shared by several test files."""

from __future__ import annotations

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
