"""Synthetic cluster snapshots (contract v1) for tests, benchmarks and demos.

``generate(nodes=..., seed=...)`` returns a snapshot dict that passes
``models.load_snapshot``. All randomness comes from one
``numpy.random.default_rng(seed)``, and every value is rounded before it is
stored, so the same parameters give byte-identical output (``to_json``).

What the parameters mean:

- ``nvlink_mix``: share of nodes per NVLink layout: ``nvswitch`` (one island),
  ``pairs`` (islands ``[[0,1],[2,3],...]``), ``cube`` (the DGX-1 hybrid
  cube-mesh edge list; 8-GPU nodes only, other sizes get ``pairs``), ``none``.
- ``occupancy``: share of all GPUs held by running jobs (met to the GPU, unless
  the packing runs out of room, which only happens at very high occupancy on
  odd GPU counts).
- ``tier_mix``: share of jobs per tier (running and pending alike).
- ``immune_share``: share of running jobs started less than their tier's
  ``min_runtime_s`` ago (R6). Only tiers with a positive ``min_runtime_s`` can be
  immune, so the share is capped by their number.
- ``multinode_share``: share of the running GPUs held by multi-node gangs (and the
  share of pending jobs that are gangs). Gangs use whole nodes, 2-8 of them.
- ``pending``: number of pending jobs (default: a quarter of the node count, at
  least 2); about one in eight was preempted before, some still in backoff (R9).
- ``pools``: put about an eighth of the nodes (the first ones) in pool
  ``reserved`` with policy ``pools: {"reserved": [1]}``; only tier-1 jobs run there.
- ``blocks_per``: nodes per ``block`` (rack); blocks share a GPU type, and every
  8 blocks share a storage target.

Placements are consistent with the contract: running jobs take aligned GPU
ranges (1, 2, 4 or 8 GPUs), ``topology: "nvlink"`` only where that range is
connected in the node's NVLink graph (else ``"any"``), no GPU is shared.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from models.policy import DEFAULT_TIERS, Backoff
from planner.sim.traces import MAX_TIER

__all__ = ["CUBE_EDGES", "DEFAULT_NOW", "generate", "parse_mix", "to_json"]

DEFAULT_NOW = "2026-11-29T08:00:00Z"
CUBE_EDGES = [[0, 1], [0, 2], [0, 3], [0, 4], [1, 2], [1, 3], [1, 5], [2, 3], [2, 6], [3, 7],
              [4, 5], [4, 6], [4, 7], [5, 6], [5, 7], [6, 7]]
DEFAULT_NVLINK_MIX = {"nvswitch": 0.6, "pairs": 0.2, "cube": 0.1, "none": 0.1}
DEFAULT_TIER_MIX = {1: 0.2, 2: 0.4, 3: 0.4}
_LAYOUTS = ("nvswitch", "pairs", "cube", "none")
_TEAMS = ("llm", "vision", "speech", "rl", "research", "infra", "ads", "search")
_KINDS = {1: ("pretrain", "prod-train", "serve"), 2: ("finetune", "eval", "train"),
          3: ("sweep", "spot", "notebook", "hpo")}
_GB_PER_GPU = 14.0  # model + optimizer state shard per GPU
_GANG_GB_PER_GPU = 20.0


def parse_mix(text: str, *, int_keys: bool = False) -> dict[Any, float]:
    """``"a=0.6,b=0.4"`` -> ``{"a": 0.6, "b": 0.4}`` (keys as ints when asked)."""
    out: dict[Any, float] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"mix entry {part!r} is not KEY=SHARE")
        try:
            share = float(value)
        except ValueError:
            raise ValueError(f"mix entry {part!r}: share {value!r} is not a number") from None
        if not math.isfinite(share) or share < 0:
            raise ValueError(f"mix entry {part!r}: share must be a finite number >= 0")
        k: Any = key.strip()
        if int_keys:
            try:
                k = int(k)
            except ValueError:
                k = None
            if k is None or not 1 <= k <= MAX_TIER:
                raise ValueError(f"mix entry {part!r}: {key!r} is not a tier number (1 to "
                                 f"{MAX_TIER:,})") from None
        if k in out:
            raise ValueError(f"mix entry {part!r}: {k} is given twice")
        out[k] = share
    if not out or sum(out.values()) <= 0:
        raise ValueError(f"mix {text!r} has no positive share")
    return out


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _normalise(mix: dict[Any, float]) -> tuple[list[Any], np.ndarray]:
    keys = list(mix)
    p = np.array([mix[k] for k in keys], dtype=float)
    return keys, p / p.sum()


def _apportion(mix: dict[Any, float], n: int, rng: np.random.Generator) -> list[Any]:
    """``n`` labels in shuffled order, with counts matching the shares (largest remainder)."""
    keys, p = _normalise(mix)
    exact = p * n
    counts = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - counts), kind="stable")[: n - int(counts.sum())]:
        counts[i] += 1
    labels = [k for k, c in zip(keys, counts) for _ in range(int(c))]
    order = rng.permutation(n)
    return [labels[i] for i in order]


def _layout_nvlink(layout: str, gpus: int) -> Any:
    if layout == "nvswitch":
        return "nvswitch"
    if layout == "none":
        return "none"
    if layout == "cube" and gpus == 8:
        return {"edges": [list(e) for e in CUBE_EDGES]}
    return [[g, g + 1] for g in range(0, gpus - 1, 2)]  # pairs (and cube on odd sizes)


def _connected_range(layout: str, gpus: int, size: int) -> bool:
    """Is an aligned range of ``size`` GPUs connected in this layout? (Aligned ranges
    of 1, 2, 4, 8 are cliques or the whole cube-mesh.)"""
    if size == 1 or layout == "nvswitch":
        return True
    if layout == "cube" and gpus == 8:
        return size in (2, 4, 8)
    if layout in ("pairs", "cube"):
        return size == 2
    return False


def _sizes_for(gpus: int) -> list[int]:
    out, s = [], 1
    while s <= min(gpus, 8):
        out.append(s)
        s *= 2
    return out


class _Builder:
    """State of one generation run (kept together so helpers stay small)."""

    def __init__(self, rng: np.random.Generator, now: datetime, policy_tiers: dict[int, Any],
                 tier_mix: dict[int, float]):
        self.rng = rng
        self.now = now
        self.min_runtime = {t: float(policy_tiers.get(t, {}).get("min_runtime_s", 0))
                            for t in tier_mix}
        self.tier_keys, self.tier_p = _normalise(tier_mix)
        self.counter: dict[str, int] = {}

    def tier(self) -> int:
        return int(self.tier_keys[int(self.rng.choice(len(self.tier_keys), p=self.tier_p))])

    def job_id(self, tier: int) -> str:
        kinds = _KINDS.get(tier, ("job",))
        kind = kinds[int(self.rng.integers(len(kinds)))]
        n = self.counter.get(kind, 0) + 1
        self.counter[kind] = n
        return f"{kind}-{n:04d}"

    def checkpoint(self, gpus: int, gang: bool, started: datetime | None) -> dict[str, Any]:
        rng = self.rng
        per_gpu = _GANG_GB_PER_GPU if gang else _GB_PER_GPU
        size = round(float(gpus * per_gpu * rng.lognormal(0.0, 0.35)), 1)
        u = rng.random()
        signal = None if u < 0.1 else ("SIGUSR1" if u < 0.2 else "SIGTERM")
        ck: dict[str, Any] = {
            "size_gb": size,
            "signal": signal,
            "barrier_s": int(rng.integers(5, 31)),
            "cleanup_s": int(rng.integers(2, 11)),
            "restore_s": int(min(900, 60 + rng.integers(0, 400) + size * rng.uniform(0.2, 1.0))),
        }
        if started is not None:
            age = (self.now - started).total_seconds()
            v = rng.random()
            if v < 0.12 or age < 600:
                ck["last_at"] = None  # none since start
            elif v < 0.27 and age > 6 * 3600:
                ck["last_at"] = _iso(self.now - timedelta(seconds=int(rng.uniform(6 * 3600, age))))
            else:
                back = int(rng.uniform(60, min(age, 7200)))
                ck["last_at"] = _iso(self.now - timedelta(seconds=back))
        return ck

    def started_at(self, tier: int, immune: bool) -> datetime:
        rng = self.rng
        mr = self.min_runtime.get(tier, 0.0)
        if immune and mr > 1:
            age = int(rng.uniform(min(60.0, mr / 2), mr - 1))
        else:
            age = int(mr + rng.exponential(8 * 3600) + 60)
        return self.now - timedelta(seconds=age)


def generate(nodes: int, gpus_per_node: int = 8, nvlink_mix: dict[str, float] | None = None,
             occupancy: float = 0.9, tier_mix: dict[int, float] | None = None,
             immune_share: float = 0.25, multinode_share: float = 0.1,
             pending: int | None = None, pools: bool = False, blocks_per: int = 16,
             seed: int = 0, now: str = DEFAULT_NOW, drain_share: float = 0.02,
             down_share: float = 0.01, storage_per_blocks: int = 8) -> dict[str, Any]:
    """A random snapshot dict (contract v1); see the module doc for the parameters."""
    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    if not 1 <= gpus_per_node <= 1024:
        raise ValueError("gpus_per_node must be between 1 and 1024")
    if blocks_per < 1:
        raise ValueError("blocks_per must be at least 1")
    for name, share in (("occupancy", occupancy), ("immune_share", immune_share),
                        ("multinode_share", multinode_share), ("drain_share", drain_share),
                        ("down_share", down_share)):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{name} must be between 0 and 1, got {share}")
    nvlink_mix = dict(nvlink_mix or DEFAULT_NVLINK_MIX)
    bad = sorted(set(nvlink_mix) - set(_LAYOUTS))
    if bad:
        raise ValueError(f"unknown NVLink layout(s) {bad}; use {', '.join(_LAYOUTS)}")
    tier_mix = dict(tier_mix or DEFAULT_TIER_MIX)
    if pools and 1 not in tier_mix:
        tier_mix[1] = 0.0
    policy_tiers: dict[int, Any] = {t: dict(d) for t, d in DEFAULT_TIERS.items()}
    extra_tiers = {t: {"preemptible": True, "min_runtime_s": 1800}
                   for t in sorted(tier_mix) if t not in DEFAULT_TIERS}
    policy_tiers.update(extra_tiers)
    rng = np.random.default_rng(seed)
    try:
        now_dt = datetime.fromisoformat(now)
    except ValueError:
        raise ValueError(f"now {now!r} is not an ISO-8601 timestamp") from None
    if now_dt.tzinfo is None:
        raise ValueError(f"now {now!r} has no time zone")
    if not datetime(1971, 1, 1, tzinfo=UTC) <= now_dt < datetime(8999, 1, 1, tzinfo=UTC):
        # (the contract's times lie in 1970-9000; the snapshot's own times precede now)
        raise ValueError(f"now {now!r} is outside 1971-01-01 to 8999-01-01")
    b = _Builder(rng, now_dt, policy_tiers, tier_mix)

    # ---- storage targets and nodes -------------------------------------------------
    n_blocks = -(-nodes // blocks_per)
    n_storage = max(1, -(-n_blocks // storage_per_blocks))
    storage = [{"id": f"fs-{s + 1:02d}", "write_gb_per_s": round(float(rng.uniform(20, 100)), 1)}
               for s in range(n_storage)]
    block_type = ["H200" if rng.random() < 0.3 else "H100" for _ in range(n_blocks)]
    n_reserved = max(1, round(nodes / 8)) if pools and nodes >= 2 else 0
    layouts = _apportion(nvlink_mix, nodes, rng)
    node_recs: list[dict[str, Any]] = []
    for i in range(nodes):
        blk = i // blocks_per
        rec: dict[str, Any] = {
            "id": f"node-{i + 1:04d}", "gpus": gpus_per_node, "gpu_type": block_type[blk],
            "nvlink": _layout_nvlink(layouts[i], gpus_per_node),
            "pool": "reserved" if i < n_reserved else "default",
            "block": f"blk-{blk + 1:03d}",
            "storage": storage[blk // storage_per_blocks]["id"],
            "local_write_gb_per_s": (None if rng.random() < 0.1
                                     else round(float(rng.uniform(2, 7)), 1)),
            "state": "up",
        }
        node_recs.append(rec)

    # ---- running jobs -----------------------------------------------------------------
    total = nodes * gpus_per_node
    target = round(occupancy * total)
    free = [gpus_per_node] * nodes  # free GPU count per node
    used = [0] * nodes  # bitmask of held GPUs per node
    running: list[dict[str, Any]] = []

    def _full_connected(i: int) -> bool:
        return _connected_range(layouts[i], gpus_per_node, gpus_per_node)

    # gangs: whole nodes, same GPU type, preferably one block
    gang_target = round(multinode_share * target)
    gang_gpus = 0
    empty_by_block: dict[int, list[int]] = {}
    for i in rng.permutation(nodes).tolist():
        empty_by_block.setdefault(i // blocks_per, []).append(i)
    while gang_target - gang_gpus >= gpus_per_node and nodes >= 2:
        remaining_nodes = (gang_target - gang_gpus) // gpus_per_node
        width = int(rng.integers(2, min(8, max(2, remaining_nodes)) + 1))
        blocks = [k for k, v in empty_by_block.items() if len(v) >= width]
        if not blocks:
            break
        blk = blocks[int(rng.integers(len(blocks)))]
        members = empty_by_block[blk][:width]
        del empty_by_block[blk][:width]
        tier = 1 if any(node_recs[i]["pool"] == "reserved" for i in members) else b.tier()
        nvlink = all(_full_connected(i) for i in members)
        full = (1 << gpus_per_node) - 1
        running.append(_running_job(b, tier, members, node_recs, gpus_per_node, full, nvlink,
                                    gang=True))
        for i in members:
            free[i] = 0
            used[i] = full
        gang_gpus += width * gpus_per_node

    # single-node jobs: spread the remaining free GPUs over the other nodes, then pack
    want_free = total - target
    open_nodes = [i for i in rng.permutation(nodes).tolist() if free[i] > 0]
    free_left = {i: 0 for i in open_nodes}
    budget = want_free
    for i in open_nodes:
        if budget <= 0:
            break
        k = min(budget, int(rng.choice([1, 1, 2, 2, 3, 4, gpus_per_node])), gpus_per_node)
        free_left[i] = k
        budget -= k
    if budget > 0:  # very low occupancy: empty more nodes
        for i in open_nodes:
            extra = min(budget, gpus_per_node - free_left[i])
            free_left[i] += extra
            budget -= extra
            if budget <= 0:
                break
    sizes = _sizes_for(gpus_per_node)
    size_p = np.array([0.25, 0.2, 0.2, 0.35][: len(sizes)])
    for i in sorted(open_nodes):
        to_use = gpus_per_node - free_left[i]
        reserved = node_recs[i]["pool"] == "reserved"
        chunks: list[int] = []
        while to_use > 0:
            fits = [k for k, s in enumerate(sizes) if s <= to_use]
            p = size_p[fits] / size_p[fits].sum()
            s = sizes[fits[int(rng.choice(len(fits), p=p))]]
            chunks.append(s)
            to_use -= s
        for s in sorted(chunks, reverse=True):
            slots = [o for o in range(0, gpus_per_node - s + 1, s)
                     if not used[i] & (((1 << s) - 1) << o)]
            if not slots:
                continue
            o = slots[int(rng.integers(len(slots)))]
            mask = ((1 << s) - 1) << o
            used[i] |= mask
            tier = 1 if reserved else b.tier()
            nvlink = _connected_range(layouts[i], gpus_per_node, s) and rng.random() < 0.85
            running.append(_running_job(b, tier, [i], node_recs, s, mask, nvlink, gang=False))

    # immunity: the chosen share of running jobs started within their tier's min_runtime
    n_immune = round(immune_share * len(running))
    eligible = [k for k, j in enumerate(running) if b.min_runtime.get(j["tier"], 0) > 1]
    chosen = set(rng.permutation(eligible)[:n_immune].tolist()) if eligible else set()
    for k, rjob in enumerate(running):
        start = b.started_at(rjob["tier"], k in chosen)
        rjob["started_at"] = _iso(start)
        rjob["checkpoint"] = b.checkpoint(rjob["gpus_per_node"] * rjob["nodes"],
                                          rjob["nodes"] > 1, start)

    # node states after placement: a drained node keeps its jobs; a down one may too
    n_drain, n_down = round(drain_share * nodes), round(down_share * nodes)
    order = rng.permutation(nodes).tolist()
    for i in order[:n_drain]:
        node_recs[i]["state"] = "drain"
    for i in order[n_drain:n_drain + n_down]:
        node_recs[i]["state"] = "down"

    # ---- pending jobs -------------------------------------------------------------------
    n_pending = max(2, nodes // 4) if pending is None else pending
    backoff = Backoff.model_validate({})  # the contract's default backoff
    types = sorted(set(block_type))
    pend: list[dict[str, Any]] = []
    for _ in range(n_pending):
        tier = b.tier()
        gang = rng.random() < multinode_share
        job: dict[str, Any] = {"id": b.job_id(tier), "tier": tier,
                               "priority": int(rng.integers(0, 101)),
                               "team": _TEAMS[int(rng.integers(len(_TEAMS)))],
                               "state": "pending"}
        if gang and nodes >= 2:
            job["gpus_per_node"] = gpus_per_node
            job["nodes"] = int(rng.integers(2, min(8, nodes) + 1))
            job["gpu_type"] = types[int(rng.integers(len(types)))]
            job["same_block"] = bool(rng.random() < 0.5 and job["nodes"] <= blocks_per)
        else:
            s = sizes[int(rng.choice(len(sizes), p=size_p / size_p.sum()))]
            job["gpus_per_node"] = s
            if rng.random() < 0.4:
                job["gpu_type"] = types[int(rng.integers(len(types)))]
        job["topology"] = "nvlink" if rng.random() < 0.85 else "any"
        job["submitted_at"] = _iso(now_dt - timedelta(seconds=int(rng.uniform(30, 6 * 3600))))
        job["checkpoint"] = b.checkpoint(job["gpus_per_node"] * job.get("nodes", 1),
                                         job.get("nodes", 1) > 1, None)
        if rng.random() < 0.125:
            k = int(rng.integers(1, 7))
            hold = backoff.cooldown(k)
            ago = int(rng.uniform(60, 1.5 * hold))  # about two in three still held
            job["preemptions"] = k
            job["last_preempted_at"] = _iso(now_dt - timedelta(seconds=ago))
        pend.append(job)

    policy: dict[str, Any] = {}
    if extra_tiers:
        policy["tiers"] = {str(t): d for t, d in extra_tiers.items()}
    if pools:
        policy["pools"] = {"reserved": [1]}
    given = {"nodes": nodes, "gpus_per_node": gpus_per_node, "nvlink_mix": nvlink_mix,
             "occupancy": occupancy, "tier_mix": tier_mix, "immune_share": immune_share,
             "multinode_share": multinode_share, "pending": n_pending, "pools": pools,
             "blocks_per": blocks_per, "seed": seed, "drain_share": drain_share,
             "down_share": down_share}
    shown = "; ".join(f"{k}={_show(v)}" for k, v in given.items())
    return {
        # (part of the output: the same arguments give byte-identical files)
        "_comment": f"Synthetic snapshot from planner.generate: {shown}.",
        "version": 1,
        "now": _iso(now_dt),
        "storage": storage,
        "nodes": node_recs,
        "jobs": running + pend,
        "policy": policy,
    }


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v:g}" for k, v in value.items())
    return str(value)


def _running_job(b: _Builder, tier: int, members: list[int], node_recs: list[dict[str, Any]],
                 gpus: int, mask: int, nvlink: bool, *, gang: bool) -> dict[str, Any]:
    rng = b.rng
    idx = [g for g in range(mask.bit_length()) if mask >> g & 1]
    job: dict[str, Any] = {
        "id": b.job_id(tier), "tier": tier, "priority": int(rng.integers(0, 101)),
        "team": _TEAMS[int(rng.integers(len(_TEAMS)))], "state": "running",
        "gpus_per_node": gpus, "nodes": len(members),
    }
    if gang or rng.random() < 0.5:
        job["gpu_type"] = node_recs[members[0]]["gpu_type"]
    job["topology"] = "nvlink" if nvlink else "any"
    if gang:
        job["same_block"] = bool(rng.random() < 0.5)
    job["placement"] = [{"node": node_recs[i]["id"], "gpus": idx} for i in members]
    return job


def to_json(snapshot: dict[str, Any]) -> str:
    """Compact, diff-friendly JSON: one node, storage target or job per line."""
    lines = ["{"]
    items = list(snapshot.items())
    for n, (key, value) in enumerate(items):
        comma = "," if n < len(items) - 1 else ""
        if isinstance(value, list) and value:
            lines.append(f"  {json.dumps(key)}: [")
            for k, item in enumerate(value):
                tail = "," if k < len(value) - 1 else ""
                lines.append("    " + json.dumps(item, separators=(", ", ": ")) + tail)
            lines.append(f"  ]{comma}")
        else:
            text = json.dumps(value, separators=(", ", ": "))
            lines.append(f"  {json.dumps(key)}: {text}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"
