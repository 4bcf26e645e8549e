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
      nodes_per_block: 16      # block ids rack-00, rack-01, ... (0 or null: no blocks)
    policy: {...}              # optional, contract section 3

Each value is checked (bad input naming ``generator.FIELD``): ``nodes`` 1 to
MAX_CLUSTER_NODES, ``storage_targets`` and ``nodes_per_block`` 0 to as many,
``gpus_per_node`` 1 to 1,024, the bandwidths as the contract's.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from models import InputError, Snapshot, load_snapshot, read_document
from models.kinds import wrong_document
from models.policy import MAX_GB_PER_S, MIN_GB_PER_S
from planner.sim.traces import Rule, field_problems

GENERATOR_DEFAULTS: dict[str, Any] = {
    "nodes": 128, "gpus_per_node": 8, "gpu_type": None, "nvlink": "nvswitch",
    "storage_targets": 4, "write_gb_per_s": 20.0, "local_write_gb_per_s": 4.0,
    "nodes_per_block": 16,
}

__all__ = ["GENERATOR_DEFAULTS", "MAX_CLUSTER_NODES", "generate_cluster", "load_cluster"]

MAX_CLUSTER_NODES = 100_000  # nodes of a generated cluster (800,000 GPUs of 8)


def _count(lo: int) -> Rule:
    return (f"a whole number from {lo} to {MAX_CLUSTER_NODES:,}",
            lambda v: type(v) is int and lo <= v <= MAX_CLUSTER_NODES)


def _rate(v: Any) -> bool:
    return type(v) in (int, float) and MIN_GB_PER_S <= v <= MAX_GB_PER_S


_RATE = f"a number of GB/s from {MIN_GB_PER_S:g} to {MAX_GB_PER_S:,.0f}"
_GENERATOR_RULES: dict[str, Rule] = {
    "nodes": _count(1),
    "gpus_per_node": ("a whole number from 1 to 1,024",
                      lambda v: type(v) is int and 1 <= v <= 1024),
    "gpu_type": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "nvlink": ('"nvswitch", "none", a list of islands like [[0,1],[2,3]] or {"edges": [...]}',
               lambda v: v in ("nvswitch", "none") or type(v) in (list, dict)),
    "storage_targets": _count(0),
    "write_gb_per_s": (_RATE, _rate),
    "local_write_gb_per_s": (f"null or {_RATE}", lambda v: v is None or _rate(v)),
    "nodes_per_block": (f"null or {_count(0)[0]} (0 or null: no blocks)",
                        lambda v: v is None or _count(0)[1](v)),
}


def generate_cluster(spec: dict[str, Any] | None = None, policy: Any = None) -> Snapshot:
    """A homogeneous cluster snapshot (no jobs) from a generator spec."""
    if spec is not None and not isinstance(spec, dict):
        raise InputError([("generator: must be an object of the generator's fields "
                           f"({', '.join(GENERATOR_DEFAULTS)})")])
    spec = dict(spec or {})
    unknown = sorted(set(spec) - set(GENERATOR_DEFAULTS), key=str)
    if unknown:
        raise InputError([f"generator.{k}: unknown field (known: {', '.join(GENERATOR_DEFAULTS)})"
                          for k in unknown])
    bad = field_problems(spec, _GENERATOR_RULES)
    if bad:
        raise InputError([f"generator.{b}" for b in bad])
    g = {**GENERATOR_DEFAULTS, **spec}
    n, st = g["nodes"], g["storage_targets"]
    storage = [{"id": f"nfs-{i}", "write_gb_per_s": g["write_gb_per_s"]} for i in range(st)]
    per_st = -(-n // st) if st else n
    per_block = g["nodes_per_block"] or 0
    nodes = []
    for i in range(n):
        node: dict[str, Any] = {"id": f"n{i:04d}", "gpus": g["gpus_per_node"],
                                "gpu_type": g["gpu_type"], "nvlink": g["nvlink"],
                                "local_write_gb_per_s": g["local_write_gb_per_s"]}
        if st:
            node["storage"] = f"nfs-{i // per_st}"
        if per_block:
            node["block"] = f"rack-{i // per_block:02d}"
        nodes.append(node)
    data = {"version": 1, "now": datetime(2000, 1, 1, tzinfo=UTC).isoformat(),
            "storage": storage, "nodes": nodes, "jobs": [], "policy": policy or {}}
    try:
        return load_snapshot(data)
    except InputError as exc:  # (what the contract says of a node, once for all of them)
        errors = [re.sub(r"^nodes\[\d+\]\.", "generator.", e) for e in exc.errors]
        raise InputError(list(dict.fromkeys(errors))) from None


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
            snap = generate_cluster(data["generator"], data.get("policy"))
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
