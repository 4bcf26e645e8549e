"""The simulated cluster: a contract snapshot (its nodes, storage and policy; its
jobs are ignored) or a small generator spec.

Generator spec (JSON or YAML)::

    generator:
      nodes: 128               # number of nodes
      gpus_per_node: 8
      gpu_type: null
      nvlink: nvswitch
      storage_targets: 4       # nodes split evenly over nfs-0 .. nfs-3
      write_gb_per_s: 20       # per storage target
      local_write_gb_per_s: 4  # per node (null: no local limit)
      nodes_per_block: 16      # block ids rack-00, rack-01, ...
    policy: {...}              # optional, contract section 3
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from models import InputError, Snapshot, load_snapshot, read_document
from models.kinds import wrong_document

GENERATOR_DEFAULTS: dict[str, Any] = {
    "nodes": 128, "gpus_per_node": 8, "gpu_type": None, "nvlink": "nvswitch",
    "storage_targets": 4, "write_gb_per_s": 20.0, "local_write_gb_per_s": 4.0,
    "nodes_per_block": 16,
}

__all__ = ["GENERATOR_DEFAULTS", "generate_cluster", "load_cluster"]


def generate_cluster(spec: dict[str, Any] | None = None, policy: Any = None) -> Snapshot:
    """A homogeneous cluster snapshot (no jobs) from a generator spec."""
    spec = dict(spec or {})
    unknown = sorted(set(spec) - set(GENERATOR_DEFAULTS))
    if unknown:
        raise InputError([f"generator.{k}: unknown field (known: {', '.join(GENERATOR_DEFAULTS)})"
                          for k in unknown])
    g = {**GENERATOR_DEFAULTS, **spec}
    n, st = int(g["nodes"]), max(0, int(g["storage_targets"]))
    storage = [{"id": f"nfs-{i}", "write_gb_per_s": g["write_gb_per_s"]} for i in range(st)]
    per_st = -(-n // st) if st else n
    per_block = int(g["nodes_per_block"] or 0)
    nodes = []
    for i in range(n):
        node: dict[str, Any] = {"id": f"n{i:04d}", "gpus": int(g["gpus_per_node"]),
                                "gpu_type": g["gpu_type"], "nvlink": g["nvlink"],
                                "local_write_gb_per_s": g["local_write_gb_per_s"]}
        if st:
            node["storage"] = f"nfs-{i // per_st}"
        if per_block:
            node["block"] = f"rack-{i // per_block:02d}"
        nodes.append(node)
    data = {"version": 1, "now": datetime(2000, 1, 1, tzinfo=UTC).isoformat(),
            "storage": storage, "nodes": nodes, "jobs": [], "policy": policy or {}}
    return load_snapshot(data)


def load_cluster(path: str | Path, policy: Any = None) -> Snapshot:
    """A cluster file: a contract snapshot (jobs dropped) or ``{"generator": {...}}``.
    ``policy`` (a file, dict or Policy) replaces the cluster's own."""
    data = read_document(path)
    if not isinstance(data, dict):
        raise InputError(["cluster: must be an object (a snapshot or a generator spec)"], str(path))
    if "generator" in data:
        extra = sorted(set(data) - {"generator", "policy"} - {k for k in data if k.startswith("_")})
        if extra:
            raise InputError([f"{k}: unknown field in a generator spec" for k in extra], str(path))
        try:
            snap = generate_cluster(data["generator"] or {}, data.get("policy"))
        except InputError as exc:
            raise InputError(exc.errors, str(path)) from None
    else:
        wrong = wrong_document(data, "snapshot")  # (a plan, kubectl's or squeue's JSON)
        if wrong:
            raise InputError([wrong], str(path))
        data = {**data, "jobs": []}
        data.setdefault("now", "2000-01-01T00:00:00Z")
        try:
            snap = load_snapshot(data)
        except InputError as exc:
            raise InputError(exc.errors, str(path)) from None
    if policy is not None:
        snap = load_snapshot(snap, policy=policy)
    return snap
