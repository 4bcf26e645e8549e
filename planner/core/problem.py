"""Preprocessing shared by every planner: what is free, who may be evicted (and why
not), which pending jobs may start, and where they could possibly go.

Everything here is solver-free and deterministic (ids in canonical order).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import chain, compress
from operator import attrgetter, is_not, itemgetter, not_

import numpy as np

from models import Job, Node, Policy, Snapshot, Storage
from models.policy import Reserve, exempt_by
from models.rules import cascade_guarded, cooldown_until, gang_group
from planner.core import topology as topo

# Sizes are compared in integer megabytes inside the models (rounded against us:
# sizes up, capacities down), so the storm check never admits a violation.
MB_PER_GB = 1000
_INF = float("inf")
NO_RIGHTS: frozenset[int] = frozenset()
_BY_ID = attrgetter("id")  # (sort key of records by id)
_JOB = attrgetter("job")
_SECOND = itemgetter(1)
_COST_ID = itemgetter(0, 1)
_VI_COST_ID = attrgetter("cost", "job.id")  # (a VictimInfo's cost, then its job's id)


def _mask(gpus: list[int]) -> int:
    m = 0
    for g in gpus:
        m |= 1 << g
    return m


def popcount(mask: int) -> int:
    return mask.bit_count()


@lru_cache(maxsize=4096)
def clique_layout(t: topo.Layout) -> tuple[tuple[int, ...], tuple[tuple[int, tuple[int, ...]], ...]]:
    """Partition a node's NVLink graph into cliques ("islands": any subset of one is
    connected) and list the non-clique components as (mask, island indices): the
    parsed layout's graph covered by topology.clique_cover (one entry per canonical
    layout: parsed layouts are interned)."""
    islands, composites = topo.clique_cover(t.adj)
    return tuple(islands), tuple((m, tuple(idx)) for m, idx in composites)


@dataclass
class NodeInfo:
    idx: int
    node: Node
    full: int  # mask of all GPUs
    held: int  # GPUs held by running jobs
    free: int  # GPUs free in the snapshot and usable (up nodes only)
    islands: tuple[int, ...]
    composites: tuple[tuple[int, tuple[int, ...]], ...]
    storage: Storage | None
    layout: topo.Layout

    def fits(self, mask: int, size: int, need_nvlink: bool) -> bool:
        return topo.layout_fits(self.layout, mask, size, need_nvlink)

    @property
    def usable(self) -> bool:
        return self.node.state == "up"


@dataclass
class VictimInfo:
    job: Job
    parts: tuple[tuple[int, int], ...]  # (node idx, GPU mask) for its nodes
    evictable: bool
    why_not: str  # why it cannot be evicted (empty when evictable)
    rule: str  # rule that protects it (R5/R6/R8/R11/down)
    cost: float
    storage: str | None
    flush_gb: float  # size counted against the storage (0 without a signal)
    flushing: bool  # has a signal: flushes during its grace, bound by R11/R12
    storm_cap_gb: float  # largest F_s under which its need stays <= max_s (inf: no limit)


@dataclass
class PendingInfo:
    job: Job
    held_until: datetime | None  # R9 cooldown end, when in force
    guarded: bool  # R10
    rights: frozenset[int]  # tiers whose victims' GPUs it may use
    candidates: list[int] = field(default_factory=list)  # nodes that could host a shard if empty
    need_nvlink: bool = True
    patient_until: datetime | None = None  # R16: free GPUs only until then (None: no wait)

    def free_only(self, candidates: list[int]) -> PendingInfo:
        """This job with no rights (only free GPUs) on ``candidates``, every other
        field the same: a copy of its fields (dataclasses.replace, which calls
        __init__ again, took 0.04 s for the 33,000 tasks of a flooded queue)."""
        out = object.__new__(PendingInfo)
        out.__dict__.update(self.__dict__)
        out.rights, out.candidates = NO_RIGHTS, candidates
        return out


@dataclass(frozen=True)
class ThrashBudget:
    """R15, the rolling eviction budget of this tick (section 9).

    ``limit`` is B, ``recent`` is H (evictions in the window before now): a plan is
    valid iff it has no victim that is not exempt, or at most ``left = B - H``
    victims in all. ``oldest`` is when the oldest counted eviction leaves the
    window (None when none is counted), for explanations."""

    limit: int
    recent: int
    exempt_tiers: frozenset[int]
    window_s: float
    running: int
    oldest: datetime | None = None
    gpu_limit: int | None = None  # the extension thrash.max_gpu_fraction: GPUs per window
    recent_gpus: int = 0  # GPUs of the recent evictions counted in the window
    # the extension thrash.exempt_if: "all" (True) asks every preemptor of an exempt
    # victim to be of an exempt tier, "any" (False, the contract's reading) one of them
    exempt_all: bool = False
    # the extension thrash.past_budget_gpu_s: what each victim past ``left`` adds to
    # the eviction cost the planners minimise (see past_budget)
    past_gpu_s: float = 0.0

    @property
    def left(self) -> int:
        return self.limit - self.recent

    @property
    def gpus_left(self) -> float:
        """GPUs the window has left (inf without a GPU limit)."""
        return math.inf if self.gpu_limit is None else self.gpu_limit - self.recent_gpus

    def exempt_by(self, tiers: Iterable[int]) -> bool:
        """Is a victim whose preemptors are of these tiers exempt?"""
        return exempt_by(tiers, self.exempt_tiers, self.exempt_all)

    def past_budget(self, victims: int) -> int:
        """Victims past what the window has left (all exempt in a valid plan), each
        costing ``past_gpu_s`` (0 when that is 0: off)."""
        return max(0, victims - max(0, self.left)) if self.past_gpu_s > 0 else 0

    def allows(self, victims: int, exempt: int, gpus: int = 0) -> bool:
        """``N <= max(0, B - H - E)`` with N = victims - exempt (and, with a GPU
        limit, their GPUs alike): no victim that is not exempt, or at most ``left``
        victims freeing at most ``gpus_left`` GPUs in all."""
        return victims == exempt or (victims <= self.left and gpus <= self.gpus_left)


class GpuOwners(Mapping[tuple[int, int], str]):
    """The running job holding each GPU: (node idx, GPU) -> job id, kept per node as
    the (GPU mask, job id) of each job there (a few per node). A dict with an entry
    per GPU held took a quarter of the problem's build at 12,500 nodes (280,000
    entries); a look-up here walks the node's jobs."""

    __slots__ = ("_on",)

    def __init__(self, nodes: int) -> None:
        self._on: list[list[tuple[int, str]]] = [[] for _ in range(nodes)]

    def get(self, key: tuple[int, int], default: str | None = None) -> str | None:  # type: ignore[override]
        ni, g = key
        bit = 1 << g
        for m, jid in self._on[ni]:
            if m & bit:
                return jid
        return default

    def __getitem__(self, key: tuple[int, int]) -> str:
        jid = self.get(key)
        if jid is None:
            raise KeyError(key)
        return jid

    def __contains__(self, key: object) -> bool:
        if not (isinstance(key, tuple) and len(key) == 2):
            return False
        ni, g = key
        return (isinstance(ni, int) and isinstance(g, int) and 0 <= ni < len(self._on)
                and g >= 0 and self.get((ni, g)) is not None)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for ni, held in enumerate(self._on):
            for m, _jid in held:
                yield from ((ni, g) for g in range(m.bit_length()) if m >> g & 1)

    def __len__(self) -> int:
        return sum(m.bit_count() for held in self._on for m, _jid in held)

    def on(self, ni: int, mask: int) -> list[tuple[str, int]]:
        """The jobs holding some of the GPUs ``mask`` of node ``ni``, each with those
        GPUs (its mask there and ``mask``)."""
        return [(jid, m & mask) for m, jid in self._on[ni] if m & mask]

    def add(self, ni: int, mask: int, jid: str) -> None:
        """Job ``jid`` holds the GPUs ``mask`` of node ``ni``."""
        self._on[ni].append((mask, jid))

    def drop(self, ni: int, jid: str) -> None:
        """Job ``jid`` holds no GPU of node ``ni`` any more."""
        self._on[ni] = [(m, j) for m, j in self._on[ni] if j != jid]

    def count(self, ni: int) -> int:
        """The running jobs holding GPUs of node ``ni``."""
        return len(self._on[ni])

    def jobs(self, ni: int) -> list[str]:
        """The running jobs holding GPUs of node ``ni``."""
        return [jid for _m, jid in self._on[ni]]

    def sort(self, nodes: Iterable[int] | None = None) -> None:
        """Put the jobs of each node (of ``nodes``; None: every node) in the order of
        their ids, as adding them in that order would."""
        for ni in range(len(self._on)) if nodes is None else nodes:
            held = self._on[ni]
            if len(held) > 1:
                held.sort(key=_SECOND)

    def copy(self) -> GpuOwners:
        out = GpuOwners(0)
        out._on = [list(held) for held in self._on]
        return out


@dataclass
class Problem:
    snap: Snapshot
    policy: Policy
    nodes: list[NodeInfo]  # by id (a node's idx is its place here)
    node_index: dict[str, int]
    running: dict[str, VictimInfo]
    pending: dict[str, PendingInfo]
    warnings: list[str]
    owner: GpuOwners  # (node idx, gpu) -> running job id
    total_gpus_up_drain: int
    thrash: ThrashBudget | None = None  # R15 (None: off)
    # the nodes policy.reserve keeps open for big shards of its tiers (reserve_nodes)
    reserved: frozenset[int] = frozenset()
    # candidate nodes by candidates list (id -> [list, set, array]: _host)
    _hosts: dict[int, list] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    # a gang's candidate nodes by group (gang_groups): (candidates id, same block, same
    # NVLink domain) -> [the list, node -> group, group -> nodes]
    _gangs: dict[tuple[int, bool, bool], list] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    # evictable victims per node, cheapest first, and their GPUs there (victims_by_node),
    # and the same as (VictimInfo, GPUs there) per node (victim_pairs_by_node)
    _victims: tuple[dict[int, list[str]], dict[tuple[str, int], int],
                    dict[int, list[tuple[VictimInfo, int]]]] | None = field(
        default=None, init=False, repr=False, compare=False)
    # evictable victims with GPUs on more than one node, cheapest first (multi_node_victims)
    _multi: list[str] | None = field(default=None, init=False, repr=False, compare=False)
    # (GPUs per shard, needs NVLink) -> per node, does a shard fit its free GPUs (free_fits)
    _free_fits: dict[tuple[int, bool], list[bool]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    # the same as numpy arrays (free_fits_array)
    _fits_arrays: dict[tuple[int, bool], np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    # victim_arrays: the (victim, node) pairs of victims_by_node as numpy columns
    _pairs: dict[str, np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False)
    # node_arrays: (free GPUs per node, most GPUs of a node)
    _arrays: tuple[np.ndarray, int] | None = field(
        default=None, init=False, repr=False, compare=False)
    # what build_problem(snap, previous=this) may lend the next tick's problem: each
    # pending shape's candidate nodes (and each running job's snapshot-only parts:
    # statics())
    _shapes: dict[tuple, list[int]] = field(default_factory=dict, init=False, repr=False,
                                            compare=False)
    _lasting: dict[str, tuple[datetime, bool]] | None = field(
        default=None, init=False, repr=False, compare=False)
    # every running job's VictimInfo and _Static, in the snapshot's order, in which
    # build_problem made them and they lie in memory (running_any_order); the last
    # field, so that when the problem goes they are freed in that order (freed in the
    # order of ids, from the dicts, they took half as long again: 0.047 s against
    # 0.030 s at 12,500 nodes)
    _made: tuple[list[VictimInfo], list[_Static]] = field(
        default_factory=lambda: ([], []), init=False, repr=False, compare=False)
    # the first tier's gangs that keep a group which the greedy variants place first in
    # their tier (planner/solver/packing.py; set by the planner, empty otherwise)
    packed: frozenset[str] = field(default=frozenset(), init=False, repr=False,
                                   compare=False)
    # ... and the bound that packing proves on objective items (name -> the most any
    # plan takes: the first tier's GPUs), for the bounds proved on the other core
    packed_bound: dict[str, float] = field(default_factory=dict, init=False, repr=False,
                                           compare=False)
    # the GPUs of the running jobs evictable now (""), and of those protected only by
    # R11 or R17, per tier and node: tallied in build_problem's pass (let_go)
    _let_go: dict[str, dict[int, dict[int, int]]] | None = field(
        default=None, init=False, repr=False, compare=False)
    _statics: dict[str, _Static] | None = field(default=None, init=False, repr=False,
                                                compare=False)
    # the running jobs with GPUs on down nodes, and those nodes; what reserve_nodes
    # asks of the running jobs (None without a reserve): from build_problem's pass,
    # for the next tick's (build_problem(snap, previous=this))
    _down: list[tuple[str, tuple[str, ...]]] = field(default_factory=list, init=False,
                                                     repr=False, compare=False)
    _tally: _ReserveTally | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def now(self) -> datetime:
        return self.snap.now

    def _host(self, info: PendingInfo) -> list:
        """The cache entry of ``info.candidates``: [the list, its set, its numpy
        array (None until asked for)], made once per list: jobs of one shape share
        their list (build_problem), and a set or array per job would be a pass over the
        cluster each (each problem its own, copies made with dataclasses.replace too)."""
        hit = self._hosts.get(id(info.candidates))
        if hit is None or hit[0] is not info.candidates:
            hit = self._hosts[id(info.candidates)] = [info.candidates,
                                                      frozenset(info.candidates), None]
        return hit

    def candidate_set(self, info: PendingInfo) -> frozenset[int]:
        """``info.candidates`` as a set, made once per list (_host)."""
        out: frozenset[int] = self._host(info)[1]
        return out

    def gang_groups(self, info: PendingInfo) -> tuple[dict[int, tuple], dict[tuple, list[int]]]:
        """The block or NVLink domain each of a gang's candidate nodes is in, as R2 has
        a gang keep one (``models.rules.gang_group``), and the candidate nodes of each,
        in candidate order: made once per candidates list and keeping (read only)."""
        job = info.job
        key = (id(info.candidates), job.same_block, job.same_nvlink_domain)
        hit = self._gangs.get(key)
        if hit is None or hit[0] is not info.candidates:
            group_of = {ni: gang_group(self.nodes[ni].node, job) for ni in info.candidates}
            groups: dict[tuple, list[int]] = {}
            for ni, g in group_of.items():
                groups.setdefault(g, []).append(ni)
            hit = self._gangs[key] = [info.candidates, group_of, groups]
        return hit[1], hit[2]

    def candidate_array(self, info: PendingInfo) -> np.ndarray:
        """``info.candidates`` as a numpy array of node indices, made once per list
        (_host)."""
        hit = self._host(info)
        if hit[2] is None:
            hit[2] = np.asarray(info.candidates, dtype=np.int64)
        out: np.ndarray = hit[2]
        return out

    def statics(self) -> dict[str, _Static]:
        """Each running job's _Static by job id, for build_problem(snap, previous=this)
        (made when first asked for: a dict of 35,000 made in the build took 0.01 s at
        12,500 nodes; none for a copy with other running jobs)."""
        if self._statics is None:
            made = self._made[1]
            self._statics = ({st.job.id: st for st in made}
                             if len(made) == len(self.running) else {})
        return self._statics

    def lasting(self) -> dict[str, tuple[datetime, bool]]:
        """The running jobs whose VictimInfo stays as it is while time goes on, each
        with (from when, whether it may come within spare_ending_within_s of its end,
        R17), for build_problem(snap, previous=this). A build lent nothing by a
        previous problem (a cold one) leaves it to be made when first asked for (in its
        pass it took 0.02 s at 12,500 nodes): each VictimInfo is then this problem's."""
        if self._lasting is None:
            made, statics = self._made
            out: dict[str, tuple[datetime, bool]] = {}
            if len(made) == len(self.running):
                spans = {False: (self.now, False), True: (self.now, True)}
                windowless = _windowless(self.policy)
                for vi, st in zip(made, statics, strict=True):
                    flag = _lasts(self.policy, vi, st, windowless)
                    if flag is not None:
                        out[vi.job.id] = spans[flag]
            self._lasting = out
        return self._lasting

    def running_any_order(self) -> Iterable[VictimInfo]:
        """The running jobs' VictimInfos for a pass whose result does not depend on
        their order: in the snapshot's order, in which build_problem made them and
        their records lie in memory (a pass over 35,000 of them in the order of ids,
        ``running``'s, reads scattered memory and takes several times as long). A
        copy with other pending jobs (:meth:`with_pending`) shares them; one with
        other running jobs (LNS's sub-problems, dataclasses.replace) gives
        ``running``'s values."""
        made = self._made[0]
        return made if len(made) == len(self.running) else self.running.values()

    def let_go(self) -> dict[str, dict[int, dict[int, int]]]:
        """The GPUs of the running jobs evictable now (under ""), and of those
        protected only by R11 or R17 (under the rule), per tier and node (a mask per
        node): tallied as build_problem makes each VictimInfo, where its records lie
        in memory (a pass of its own over 35,000 running jobs took 0.02 s at 12,500
        nodes); worked out here for a copy with other running jobs (read only)."""
        if self._let_go is None or len(self._made[0]) != len(self.running):
            out: dict[str, dict[int, dict[int, int]]] = {"": {}, "R11": {}, "R17": {}}
            for v in self.running.values():
                _tally_let_go(out, v)
            return out
        return self._let_go

    def victims_by_node(self) -> tuple[dict[int, list[str]], dict[tuple[str, int], int]]:
        """Evictable running jobs per node, cheapest first (cost, then id), and the GPU
        mask of each on each of its nodes; made once per problem and shared by every
        greedy planner on it (read only; look-ups only: the order of the nodes is
        none in particular)."""
        return self._victim_tables()[:2]

    def victim_pairs_by_node(self) -> dict[int, list[tuple[VictimInfo, int]]]:
        """:meth:`victims_by_node` as (VictimInfo, its GPUs on the node) per node, in
        the same order (read only)."""
        return self._victim_tables()[2]

    def _victim_tables(self) -> tuple[dict[int, list[str]], dict[tuple[str, int], int],
                                      dict[int, list[tuple[VictimInfo, int]]]]:
        if self._victims is None:
            on_node: dict[int, list[tuple[float, str, VictimInfo, int]]] = {}
            vmask: dict[tuple[str, int], int] = {}
            for v in self.running_any_order():
                if v.evictable:
                    vid, cost = v.job.id, v.cost
                    for ni, m in v.parts:
                        on_node.setdefault(ni, []).append((cost, vid, v, m))
                        vmask.setdefault((vid, ni), m)
            by_node: dict[int, list[str]] = {}
            pairs: dict[int, list[tuple[VictimInfo, int]]] = {}
            for ni, entries in on_node.items():
                entries.sort(key=_COST_ID)
                by_node[ni] = [e[1] for e in entries]
                pairs[ni] = [(e[2], e[3]) for e in entries]
            self._victims = (by_node, vmask, pairs)
        return self._victims

    def multi_node_victims(self) -> list[str]:
        """The evictable running jobs with GPUs on more than one node, cheapest first
        (cost, then id); made once per problem (read only)."""
        if self._multi is None:
            multi = [vi for vi in self.running_any_order() if len(vi.parts) > 1 and vi.evictable]
            self._multi = [vi.job.id for vi in sorted(multi, key=_VI_COST_ID)]
        return self._multi

    def victim_arrays(self) -> dict[str, np.ndarray]:
        """The pairs (victim, node) of :meth:`victims_by_node`, node by node in its
        order (cheapest first), as numpy columns: ``node``, ``gpus`` (the victim's
        GPUs on the node), ``cost``, ``total`` (all its GPUs), ``tier``, ``flushing``
        and ``flush_gb`` (R11/R12) and ``storage`` (the index of its storage target
        in ``storages``, -1 for none or no flush). Made once per problem (read
        only): the greedy planner's tables of bounds are computed from them."""
        if self._pairs is None:
            by_node, vmask = self.victims_by_node()
            run = self.running
            cols: list[list] = [[] for _ in range(8)]
            (node, gpus, cost, total, tier, flushing, flush_gb, storage) = cols
            where: dict[str, int] = {}
            for ni in sorted(by_node):
                for v in by_node[ni]:
                    vi = run[v]
                    node.append(ni)
                    gpus.append(vmask[(v, ni)].bit_count())
                    cost.append(vi.cost)
                    total.append(vi.job.total_gpus)
                    tier.append(vi.job.tier)
                    flushing.append(vi.flushing)
                    flush_gb.append(vi.flush_gb)
                    storage.append(where.setdefault(vi.storage, len(where))
                                   if vi.flushing and vi.storage is not None else -1)
            self._pairs = {
                "node": np.asarray(node, np.int64), "gpus": np.asarray(gpus, np.int64),
                "cost": np.asarray(cost, np.float64), "total": np.asarray(total, np.int64),
                "tier": np.asarray(tier, np.int64), "flushing": np.asarray(flushing, bool),
                "flush_gb": np.asarray(flush_gb, np.float64),
                "storage": np.asarray(storage, np.int64),
                "storages": np.asarray(list(where), dtype=object)}
        return self._pairs

    def free_fits(self, gpn: int, need_nvlink: bool) -> list[bool]:
        """Per node (by index), does one shard of ``gpn`` GPUs (connected when
        ``need_nvlink``) fit the GPUs free in the snapshot (R3)? Made once per shape
        and problem, nodes of one layout and free set decided once (read only)."""
        flags = self._free_fits.get((gpn, need_nvlink))
        if flags is None:
            seen: dict[tuple[int, int], bool] = {}
            flags = []
            for nd in self.nodes:
                k = (id(nd.layout), nd.free)
                ok = seen.get(k)
                if ok is None:
                    ok = seen[k] = topo.layout_fits(nd.layout, nd.free, gpn, need_nvlink)
                flags.append(ok)
            self._free_fits[(gpn, need_nvlink)] = flags
        return flags

    def free_fits_array(self, gpn: int, need_nvlink: bool) -> np.ndarray:
        """:meth:`free_fits` as a numpy array of booleans (read only)."""
        arr = self._fits_arrays.get((gpn, need_nvlink))
        if arr is None:
            arr = self._fits_arrays[(gpn, need_nvlink)] = np.asarray(
                self.free_fits(gpn, need_nvlink), dtype=bool)
        return arr

    def node_arrays(self) -> tuple[np.ndarray, int]:
        """Per node (by index) its GPUs free in the snapshot and usable, and the most
        GPUs a node has. Made once per problem (read only): the greedy planner's
        tables of bounds use them."""
        if self._arrays is None:
            free = np.fromiter((nd.free.bit_count() for nd in self.nodes), dtype=np.int64,
                               count=len(self.nodes))
            self._arrays = (free, max((nd.node.gpus for nd in self.nodes), default=0))
        return self._arrays

    def with_pending(self, pending: dict[str, PendingInfo]) -> Problem:
        """This problem with other pending jobs; what depends only on the nodes and
        the running jobs (victims_by_node, multi_node_victims, free_fits and its arrays,
        node_arrays) is shared, not made again."""
        out = replace(self, pending=pending)
        out._victims, out._free_fits, out._multi = self._victims, self._free_fits, self._multi
        out._made, out._let_go = self._made, self._let_go  # (the same running jobs)
        out._statics, out._lasting = self._statics, self._lasting
        out._down, out._tally = self._down, self._tally
        out._fits_arrays = self._fits_arrays
        out._arrays = self._arrays
        return out

    def exempt(self, tier: int) -> bool:
        """R15: do the victims of a job of this tier count as exempt?"""
        return self.thrash is not None and tier in self.thrash.exempt_tiers


@dataclass(slots=True)
class _Static:
    """What a running job's VictimInfo takes from the snapshot apart from ``now``: its
    GPUs, storage, flush and storm cap (R11/R12). Valid for a later snapshot while the
    job and the policy are the same objects and the nodes and storage targets it is
    on are too (records are frozen: a loader that takes over unchanged records,
    models.cache.SnapshotCache, and the simulator give them). Read only."""

    job: Job
    parts: tuple[tuple[int, int], ...]  # (node idx, GPU mask), in its placement's order
    on_down: tuple[str, ...]  # its down nodes
    storage: Storage | None
    flushing: bool
    cap: float
    solo_s: float
    r11: str  # why R11 protects it, or ""


@dataclass(slots=True)
class _Tick:
    """What :func:`_static` and :func:`_victim` look up for every running job, worked
    out once per build: by node index, whether the node is down and its local write
    bandwidth (0: none); by tier, (R5 preemptible, preemptible at ``now`` (R5 and
    R8), R6's ``min_runtime_s``); R11's slack before a job's barrier and cleanup."""

    down: list[bool]
    local_bw: list[float]
    tiers: dict[int, tuple[bool, bool, float]]
    slack: float  # grace.max_s / grace.safety; -1 when grace.min_s > grace.max_s

    @classmethod
    def of(cls, policy: Policy, now: datetime, nodes: list[NodeInfo]) -> _Tick:
        g = policy.grace
        return cls([nd.node.state == "down" for nd in nodes],
                   [nd.node.local_write_gb_per_s or 0.0 for nd in nodes],
                   {t: (tp.preemptible, tp.preemptible_at(now), float(tp.min_runtime_s))
                    for t, tp in policy.tiers.items()},
                   -1.0 if g.min_s > g.max_s else g.max_s / g.safety)


def _static(policy: Policy, j: Job, tick: _Tick, node_index: dict[str, int],
            nodes: list[NodeInfo]) -> _Static:
    """A running job's _Static: models.rules' local_flush_s and solo_flush_s, worked
    out from ``tick`` (the same numbers), and its storm cap: the largest storage load
    F_s (GB) for which R12's need(v) stays <= grace.max_s (-1: none; inf: no
    limit). (Run for every running job of a cold tick: written for speed, each
    record's field read once.)"""
    parts: tuple[tuple[int, int], ...] = ()
    on_down: tuple[str, ...] = ()
    placement = j.placement
    if placement:
        # (tuples: a job on one node, most, makes one, and none on no down node)
        down = tick.down
        for p in placement:
            ni = node_index[p.node]
            gpus = p.gpus
            parts += ((ni, 1 << gpus[0] if len(gpus) == 1 else _mask(gpus)),)
            if down[ni]:
                on_down += (p.node,)
        # (models.rules.victim_storage: its first node's, which NodeInfo holds)
        stor = nodes[parts[0][0]].storage
    else:
        stor = None
    ck = j.checkpoint
    if ck.signal is None:  # (models.rules.flushes)
        return _Static(j, parts, on_down, stor, False, _INF, 0.0, "")
    size, barrier, cleanup = ck.size_gb, ck.barrier_s, ck.cleanup_s
    local = 0.0  # models.rules.local_flush_s
    if parts:
        shard = size / j.nodes
        local_bw = tick.local_bw
        for ni, _m in parts:
            bw = local_bw[ni]
            if bw and shard / bw > local:
                local = shard / bw
    # the storm cap
    slack = -1.0 if tick.slack < 0 else tick.slack - barrier - cleanup
    if slack < local - 1e-12 or slack < 0:
        cap = -1.0
    else:
        cap = _INF if stor is None else slack * stor.write_gb_per_s
    # models.rules.solo_flush_s
    solo = max(size / stor.write_gb_per_s if stor is not None else 0.0, local)
    r11 = ""
    if cap < 0 or size > cap + 1e-9:
        need = policy.grace.need(solo, barrier, cleanup)
        r11 = (f"its checkpoint flush needs a grace of {need:.0f} s > grace.max_s "
               f"{policy.grace.max_s:.0f} s")
    return _Static(j, parts, on_down, stor, True, cap, solo, r11)


def _nvlink_key(nvlink: object) -> object:
    """A node's ``nvlink`` as a dict key: equal for equal values (a name, islands or
    edges; a tuple is a tenth of a repr's time)."""
    if isinstance(nvlink, str):
        return nvlink
    if isinstance(nvlink, list):
        return tuple(map(tuple, nvlink))
    return ("edges", tuple(nvlink.edges))  # type: ignore[attr-defined]


def _held_before(snap: Snapshot, previous: Problem | None, changed: set[int] | None
                 ) -> tuple[GpuOwners, list[int], set[str]]:
    """The owner map ((node idx, GPU) -> running job) and GPUs held per node of the
    running jobs that build_problem keeps from ``previous`` (same record, no changed
    node): previous's, less every other job's; and the ids of those others (the
    previous problem's running jobs not kept). Empty without a previous problem. (The
    jobs not kept found with C loops: a pass over 35,000 running jobs in Python took
    0.02-0.03 s at 12,500 nodes.)"""
    statics = previous.statics() if previous is not None and changed is not None else {}
    if not statics:
        return GpuOwners(len(snap.nodes)), [0] * len(snap.nodes), set()
    assert previous is not None and changed is not None
    owner = previous.owner.copy()
    held = [nd.held for nd in previous.nodes]
    ids = list(statics)
    # those whose record is another (or none: ended), and those on a changed node
    gone = set(compress(ids, map(is_not, map(_JOB, statics.values()),
                                 map(snap.job_map().get, ids))))
    for ni in changed:
        gone.update(previous.owner.jobs(ni))
    for jid in gone:
        for ni, m in statics[jid].parts:
            held[ni] &= ~m
            owner.drop(ni, jid)
    return owner, held, gone


def changed_nodes(snap: Snapshot, previous: Problem | None) -> set[int] | None:
    """The indices of the nodes that are not the previous problem's objects, when the
    node ids, the storage targets and the policy are the same (else None: nothing
    of ``previous`` holds)."""
    if (previous is None or previous.policy is not snap.policy
            or len(previous.snap.storage) != len(snap.storage)
            or any(a is not b for a, b in zip(previous.snap.storage, snap.storage, strict=True))):
        return None
    ids = sorted(n.id for n in snap.nodes)
    if len(ids) != len(previous.nodes) or any(
            a != b.node.id for a, b in zip(ids, previous.nodes, strict=True)):
        return None
    node_map = snap.node_map()
    return {nd.idx for nd in previous.nodes if node_map[nd.node.id] is not nd.node}


def _windowless(policy: Policy) -> set[int]:
    """The tiers without preemption windows (R8)."""
    return {t for t, tp in policy.tiers.items() if not tp.windows}


def _lasts(policy: Policy, vi: VictimInfo, st: _Static, windowless: set[int]) -> bool | None:
    """Does running job ``vi``, just made, stay as it is while time goes on? Its cost
    does not grow (no progress lost: it flushes) and its verdict does not change as
    now goes on (R5, a down node; or its R6 immunity over, no windows (the tiers
    ``windowless``)): then whether it may come within spare_ending_within_s of its
    end (R17); None where it does not."""
    if not st.flushing:
        return None
    rule = vi.rule
    if rule in ("R5", "down"):
        return False
    if rule in ("", "R11") and vi.job.tier in windowless:
        return policy.spare_ending_within_s > 0 and vi.job.expected_end_at is not None
    return None


def _victim(policy: Policy, now: datetime, j: Job, st: _Static, tick: _Tick) -> VictimInfo:
    """A running job's VictimInfo at ``now``: what protects it (R5, a down node, R6,
    R8, R17, R11, in that order) and its eviction cost (models.rules' immune_for_s
    and cost_of, worked out from ``tick``: the same numbers). (Run for every running
    job of a tick: written for speed.)"""
    preemptible, now_ok, min_runtime = tick.tiers[j.tier]
    started = j.started_at
    age = 0.0 if started is None else (now - started).total_seconds()
    why = rule = ""
    if not preemptible:
        why, rule = f"tier {j.tier} is not preemptible", "R5"
    elif st.on_down:
        why, rule = f"it has GPUs on down node {st.on_down[0]}", "down"
    elif min_runtime > age:
        why, rule = f"immune for another {_dur(min_runtime - age)}", "R6"
    elif not now_ok:
        why, rule = f"tier {j.tier} is outside its preemption windows", "R8"
    elif (j.expected_end_at is not None
          and (ending := ending_soon(policy, now, j)) is not None):
        why, rule = (f"it is expected to end within {_dur(ending)} (expected_end_at "
                     f"{_iso(j.expected_end_at)})"), "R17"
    elif st.r11:
        why, rule = st.r11, "R11"
    ck = j.checkpoint
    flushing = st.flushing
    if flushing:
        lost = 0.0
    else:  # (models.rules.lost_s)
        since = ck.last_at or started
        lost = 0.0 if since is None else (now - since).total_seconds()
        if lost < 0:
            lost = 0.0
    stor = st.storage
    return VictimInfo(j, st.parts, not why, why, rule,
                      j.gpus_per_node * j.nodes * (lost + ck.restore_s + st.solo_s),
                      None if stor is None else stor.id,
                      ck.size_gb if flushing else 0.0, flushing, st.cap)


def build_problem(snap: Snapshot, previous: Problem | None = None) -> Problem:
    """The problem of a snapshot. ``previous``, the problem of an earlier snapshot of
    the same cluster (a scheduling loop's last tick), lends what did not change: the
    GPUs, storage, flush and storm cap of each running job whose record, nodes,
    storage targets and policy are the same objects, its whole VictimInfo while time
    cannot change it (_victim), and the candidate nodes of each pending job's shape
    when every node and the policy are. The running jobs whose VictimInfo it lends
    are not gone over at all: the build starts from its tallies (owners, let_go, the
    reserve's, ...) less the other jobs' (at 12,500 nodes some 24,000 of 35,000 jobs,
    those whose verdict and cost time does not change). The problem is the one built
    without it (tests/test_incremental.py)."""
    policy = snap.policy
    now = snap.now
    changed = changed_nodes(snap, previous)
    nodes: list[NodeInfo] = []
    node_index: dict[str, int] = {}
    # nodes of one NVLink layout share its parse (a cluster has a few kinds of node)
    layouts: dict[tuple, tuple] = {}
    # a node that is the previous problem's object keeps its layout and storage
    # target (the same ids in the same order, the same storage targets: changed_nodes)
    same = previous.nodes if previous is not None and changed is not None else None
    for i, n in enumerate(sorted(snap.nodes, key=_BY_ID)):
        full = (1 << n.gpus) - 1
        if same is not None and same[i].node is n:
            nd = same[i]
            nodes.append(NodeInfo(i, n, full, 0, 0, nd.islands, nd.composites, nd.storage,
                                  nd.layout))
            node_index[n.id] = i
            continue
        kind = (_nvlink_key(n.nvlink), n.gpus)
        known = layouts.get(kind)
        if known is None:
            layout = topo.layout(n.nvlink_raw(), n.gpus)
            known = layouts[kind] = (*clique_layout(layout), layout)
        islands, comps, layout = known
        nodes.append(NodeInfo(i, n, full, 0, 0, islands, comps, snap.storage_of(n), layout))
        node_index[n.id] = i
    # what the previous problem lends (nothing where its cluster is another)
    before, lasted, before_info = ((previous.statics(), previous.lasting(), previous.running)
                                   if previous is not None and changed is not None
                                   else ({}, {}, {}))
    # the GPUs held per node and who holds each: the previous problem's, less those of
    # its running jobs that this tick does not keep (then each job not kept adds its)
    owner, held_by, gone = _held_before(snap, previous, changed)
    warnings: list[str] = list(snap.warnings)  # the snapshot writer's, first
    run = snap.running()
    # the running jobs the previous problem lends as they are, _Static, VictimInfo and
    # their part of every tally of its pass (_staying): the pass goes over the others
    # only, starting from its tallies less theirs (_lent_tallies)
    stay = _staying(previous, lasted, gone, now) if before else set()
    work = run
    now_ids: list[str] = []
    if stay:
        assert previous is not None
        let_go, owned, tally, on_down_jobs, lasting_lent = _lent_tallies(previous, stay, gone)
        now_ids = list(map(_BY_ID, run))
        work = list(compress(run, map(not_, map(stay.__contains__, now_ids))))
    else:
        let_go = {"": {}, "R11": {}, "R17": {}}
        owned = set()
        # what reserve_nodes asks of the running jobs, tallied in this pass (a pass of
        # its own over 35,000 jobs took 0.02-0.05 s at 12,500 nodes)
        tally = _ReserveTally.of(policy, len(nodes))
        on_down_jobs = []
        lasting_lent = {}
    # VictimInfos that stay as they are while time goes on: job id -> (from when,
    # whether it may come within spare_ending_within_s of its end, R17); made here
    # only where the previous problem lends something (else Problem.lasting makes
    # them when asked)
    lasting: dict[str, tuple[datetime, bool]] | None = lasting_lent if before else None
    spans = {False: (now, False), True: (now, True)}  # (lasting's values: one of each)
    windowless = _windowless(policy)
    tick = _Tick.of(policy, now, nodes)
    add_owner = owner.add
    r_tiers, r_rights, r_closed, r_big = ((tally.tiers, tally.rights, tally.closed, tally.big)
                                          if tally is not None else (set(), set(), None, {}))
    # the running jobs are read in the snapshot's order, in which their records lie in
    # memory (in the order of ids, scattered there, reading them took twice as long at
    # 12,500 nodes); ``running`` (made once, from these lists: a dict filled in this
    # pass and another for each _Static took 0.02 s more at 12,500 nodes) and each
    # node's GPU holders are put in the order of ids below
    touched: set[int] = set()  # nodes where a job's GPUs were added to ``owner``
    ids: list[str] = []
    in_order: list[VictimInfo] = []  # (Problem._made)
    made_st: list[_Static] = []  # (... every job's, kept or made)
    for j in work:
        jid = j.id
        st = before.get(jid)
        # (a job of the previous problem is kept unless _held_before let it go: the
        # same record, on no changed node)
        kept = st is not None and jid not in gone
        if not kept:
            st = _static(policy, j, tick, node_index, nodes)
            for ni, m in st.parts:
                held_by[ni] |= m
                add_owner(ni, m, jid)
            if before:
                touched.update(ni for ni, _m in st.parts)
        assert st is not None
        made_st.append(st)
        ids.append(jid)
        if st.on_down:
            on_down_jobs.append((jid, st.on_down))
        span = lasted.get(jid) if kept else None
        if span is not None and span[0] <= now and (
                not span[1] or ending_soon(policy, now, j) is None):
            vi = before_info[jid]
            assert lasting is not None
            lasting[jid] = span
        else:
            vi = _victim(policy, now, j, st, tick)
            if lasting is not None and (flag := _lasts(policy, vi, st, windowless)) is not None:
                lasting[jid] = spans[flag]
        in_order.append(vi)
        if not stay:
            _tally_let_go(let_go, vi)  # (Problem.let_go)
        else:  # (a kept job's part of the lent tallies changes only with its rule)
            if kept:
                old = before_info[jid]
                if old.rule == vi.rule:  # (evictable: rule "")
                    continue
                _retally_let_go(let_go, owned, old, False)
                if tally is not None:
                    tally.drop(old)
            _retally_let_go(let_go, owned, vi, True)
        if r_closed is not None and st.parts:  # (_ReserveTally)
            tier = j.tier
            if not vi.evictable or tier not in r_rights:
                for ni, _m in st.parts:
                    r_closed[ni] += 1
            if tier in r_tiers:
                r_big[jid] = (j.gpus_per_node, st.parts[0][0])
    statics: dict[str, _Static] | None = None
    if stay:  # the previous problem's, with the jobs of this pass
        assert previous is not None
        running, statics = _merged(previous, before, now_ids, ids, in_order, made_st)
        # (in the snapshot's order, as a pass over every job makes them)
        made = (list(map(running.__getitem__, now_ids)), list(map(statics.__getitem__, now_ids)))
    else:
        # (the ids sorted alone: list.sort compares strings fastest)
        running = {ids[k]: in_order[k] for k in sorted(range(len(ids)), key=ids.__getitem__)}
        made = (in_order, made_st)
    del ids
    owner.sort(touched if before else None)
    for jid, on_down in sorted(on_down_jobs):
        warnings.append(f"running job '{jid}' has GPUs on down node(s) "
                        f"{', '.join(on_down)}: ignored there and never evicted")
    # R15 counts the running jobs that are not ignored: none with GPUs on a down node,
    # whatever rule (R5 for a tier that is not preemptible) protects it first
    ignored = len(on_down_jobs)
    total = 0
    for nd in nodes:
        nd.held = held_by[nd.idx]
        if nd.node.state == "up":
            nd.free = nd.full & ~nd.held
        if nd.node.state in ("up", "drain"):
            total += nd.node.gpus
    pending: dict[str, PendingInfo] = {}
    # candidate nodes per job shape, shared by jobs of the same shape (read-only); the
    # previous problem's when the nodes and the policy are the same objects
    hosts: dict[tuple, list[int]] = previous._shapes if previous and changed == set() else {}
    # node_can_host only looks at a node's kind: decide once per kind, not per node
    kinds: list[list[int]] | None = None  # (the node indices of each kind)
    # ... and shapes whose kinds of node are the same share one list (some 10 lists for
    # 75 shapes at 12,500 nodes; sorting each shape's own took 0.01 s)
    lists: dict[tuple[int, ...], list[int]] = {}
    # (jobs of one tier share their rights)
    tier_rights = {t: frozenset(tp.can_preempt) for t, tp in policy.tiers.items()}
    for j in sorted(snap.pending(), key=_BY_ID):
        until = cooldown_until(policy, j)
        held = until if until is not None and now < until else None
        guarded = cascade_guarded(policy, now, j)
        waits = patience_until(policy, now, j)
        # R10 and R16: only GPUs free in the snapshot
        rights = NO_RIGHTS if guarded or waits is not None else tier_rights[j.tier]
        need_nv = j.topology == "nvlink" and j.gpus_per_node > 1
        info = PendingInfo(j, held, guarded, rights, need_nvlink=need_nv, patient_until=waits)
        key = (j.tier, j.gpus_per_node, j.gpu_type, need_nv, j.same_block, j.same_nvlink_domain)
        if key not in hosts:
            if kinds is None:
                kinds = list(_kinds(nodes).values())
            fit = tuple(k for k, members in enumerate(kinds)
                        if node_can_host(nodes[members[0]], j, policy))
            found = lists.get(fit)
            if found is None:
                found = lists[fit] = sorted(chain.from_iterable(kinds[k] for k in fit))
            hosts[key] = found
        info.candidates = hosts[key]
        pending[j.id] = info
    reserved = reserve_nodes(policy, nodes, pending, owner, tally)
    budget = thrash_budget(snap, len(running) - ignored)
    if reserved:
        _keep_off(policy, nodes, pending, reserved,
                  spent=budget is not None and budget.left <= 0)
    out = Problem(snap, policy, nodes, node_index, running, pending, warnings, owner, total,
                  budget, reserved)
    out._shapes, out._lasting = hosts, lasting
    out._made, out._let_go, out._statics = made, let_go, statics
    out._down, out._tally = on_down_jobs, tally
    return out


def _staying(previous: Problem | None, lasted: dict[str, tuple[datetime, bool]],
             gone: set[str], now: datetime) -> set[str]:
    """The running jobs of ``previous`` that build_problem takes over as they are, with
    their part of each tally of its pass: those kept (not in ``gone``) whose
    VictimInfo lasts (``lasted``) with no R17 to look at, when time has not gone back
    (each lasts from previous.now or before, so it holds at ``now``). None (an empty
    set) when previous's tallies are not its own running jobs' (a copy with other
    running jobs) or it has no reserve tally for a policy with a reserve."""
    if (previous is None or now < previous.now or previous._let_go is None
            or len(previous._made[0]) != len(previous.running)
            or (previous.policy.reserve is not None and previous._tally is None)):
        return set()
    # (C loops: those lasting, less those R17 is to look at, less those not kept)
    stay = set(compress(lasted.keys(), map(not_, map(_SECOND, lasted.values()))))
    stay -= gone
    return stay


def _lent_tallies(previous: Problem, stay: set[str], gone: set[str]
                  ) -> tuple[dict[str, dict[int, dict[int, int]]], set[tuple[str, int]],
                             _ReserveTally | None,
                             list[tuple[str, tuple[str, ...]]], dict[str, tuple[datetime, bool]]]:
    """Where build_problem's pass over the running jobs not in ``stay`` starts: the
    tallies of ``previous``'s pass (let_go and the reserve's less its jobs ``gone``,
    those not kept; the jobs on down nodes and what lasts of those in ``stay``). (A
    job kept but not in ``stay`` changes its part of the tallies in the pass.)"""
    let_go = {rule: dict(tiers) for rule, tiers in (previous._let_go or {}).items()}
    owned: set[tuple[str, int]] = set()  # (its dicts per node copied when written to)
    tally = previous._tally.copy() if previous._tally is not None else None
    running = previous.running
    for jid in gone:
        vi = running[jid]
        _retally_let_go(let_go, owned, vi, False)
        if tally is not None:
            tally.drop(vi)
    down = [d for d in previous._down if d[0] in stay]
    lasted = previous.lasting()
    lasting = dict(lasted)
    for jid in lasted.keys() - stay:  # (C loops: the few R17 looks at and those gone)
        del lasting[jid]
    return let_go, owned, tally, down, lasting


def _merged(previous: Problem, before: dict[str, _Static], now_ids: list[str],
            ids: list[str], made: list[VictimInfo], made_st: list[_Static]
            ) -> tuple[dict[str, VictimInfo], dict[str, _Static]]:
    """``running`` and the _Static of each running job (``now_ids``): ``previous``'s
    (``before``) for the jobs build_problem's pass did not go over, and those the pass
    made (``ids``, ``made``, ``made_st``) for the others; in the order of ids."""
    running = dict(previous.running)
    statics = dict(before)
    for jid in running.keys() - set(now_ids):  # (ended, or pending again)
        del running[jid], statics[jid]
    kept = len(running)
    running.update(zip(ids, made, strict=True))
    statics.update(zip(ids, made_st, strict=True))
    if len(running) > kept:  # arrivals, at the end (sorting ids in order but them: a merge)
        ordered = sorted(running)
        running = dict(zip(ordered, map(running.__getitem__, ordered), strict=True))
    return running, statics


def _tally_let_go(out: dict[str, dict[int, dict[int, int]]], v: VictimInfo) -> None:
    """Add running job ``v``'s GPUs to Problem.let_go's ``out`` if it is evictable or
    protected only by R11 or R17."""
    into = out.get("" if v.evictable else v.rule)
    if into is not None:
        by_node = into.setdefault(v.job.tier, {})
        for ni, m in v.parts:
            by_node[ni] = by_node.get(ni, 0) | m


def _retally_let_go(out: dict[str, dict[int, dict[int, int]]], owned: set[tuple[str, int]],
                    v: VictimInfo, add: bool) -> None:
    """Add running job ``v``'s GPUs to Problem.let_go's ``out`` as _tally_let_go does,
    or take them off (``add`` False: no other job holds them, R1), dropping the entries
    left empty. ``out``'s dicts per node are another problem's until written to: each
    is copied when first written, and its (rule, tier) put in ``owned``."""
    key = "" if v.evictable else v.rule
    into = out.get(key)
    if into is None:
        return
    tier = v.job.tier
    by_node = into.get(tier)
    if by_node is None or (key, tier) not in owned:
        by_node = into[tier] = {} if by_node is None else dict(by_node)
        owned.add((key, tier))
    if add:
        for ni, m in v.parts:
            by_node[ni] = by_node.get(ni, 0) | m
        return
    for ni, m in v.parts:
        left = by_node[ni] & ~m
        if left:
            by_node[ni] = left
        else:
            del by_node[ni]
    if not by_node:
        del into[tier]


class _ReserveTally:
    """What reserve_nodes asks of the running jobs: how many jobs closed to the
    reserve's tiers (not evictable now, or of a tier none of them may evict) each node
    holds, and the jobs of those tiers (whose big shards say which kinds of node to
    keep, _wanted: job id -> (GPUs per node, first node)); build_problem fills it in
    its pass over the running jobs."""

    __slots__ = ("big", "closed", "rights", "tiers")

    def __init__(self, tiers: set[int], rights: set[int], nodes: int):
        self.tiers, self.rights = tiers, rights
        self.closed = [0] * nodes
        self.big: dict[str, tuple[int, int]] = {}

    @classmethod
    def of(cls, policy: Policy, nodes: int) -> _ReserveTally | None:
        """An empty tally for ``policy.reserve`` (None without one)."""
        res = policy.reserve
        if res is None:
            return None
        tiers = {t for t in res.tiers if t in policy.tiers}
        return cls(tiers, {v for t in tiers for v in policy.tier(t).can_preempt}, nodes)

    def copy(self) -> _ReserveTally:
        out = _ReserveTally(self.tiers, self.rights, 0)
        out.closed, out.big = list(self.closed), dict(self.big)
        return out

    def drop(self, v: VictimInfo) -> None:
        """Take running job ``v`` off the tally (as build_problem's pass added it)."""
        if not v.parts:
            return
        if not v.evictable or v.job.tier not in self.rights:
            for ni, _m in v.parts:
                self.closed[ni] -= 1
        self.big.pop(v.job.id, None)

    def kinds(self, res: Reserve, nodes: list[NodeInfo]) -> set[tuple[str | None, int]]:
        """The kinds of node (GPU type and size) the big shards of the reserve's tiers
        run on."""
        out: set[tuple[str | None, int]] = set()
        seen: set[tuple[int, str | None, int]] = set()
        for gpus_per_node, ni in self.big.values():
            n = nodes[ni].node
            key = (gpus_per_node, n.gpu_type, n.gpus)
            if key not in seen:
                seen.add(key)
                if res.takes(gpus_per_node, n.gpus):
                    out.add((n.gpu_type, n.gpus))
        return out


def reserve_nodes(policy: Policy, nodes: list[NodeInfo], pending: dict[str, PendingInfo],
                  owner: GpuOwners, tally: _ReserveTally | None) -> frozenset[int]:
    """The nodes ``policy.reserve`` keeps open this tick (an extension, a planner's
    choice: models.policy.Reserve): of the up nodes in a pool admitting one of its
    tiers whose every running job one of them may evict now, and that a *big shard*
    of its tiers could use (_wanted), the ``count`` with the most free GPUs
    (``prefer: empty``; the fewest with ``prefer: full``), then the fewest running
    jobs, then by id; none when no such shard runs or waits. ``owner``: who holds
    each GPU; ``tally``: the running jobs' tally (None without a reserve)."""
    res = policy.reserve
    up = [nd for nd in nodes if nd.node.state == "up"]
    k = 0 if res is None else res.count(len(up))
    if not k:
        return frozenset()
    assert res is not None and tally is not None
    tiers, closed = tally.tiers, tally.closed  # (the reserve's tiers the policy has)
    wanted = _wanted(res, tiers, tally.kinds(res, nodes), pending)
    if wanted is None:
        return frozenset()  # (no big shard of the reserve's tiers to keep nodes for)
    pools: dict[str, bool] = {}
    opened = []
    for nd in up:
        if closed[nd.idx]:
            continue
        pool = nd.node.pool
        if pool not in pools:
            pools[pool] = any(policy.pool_admits(pool, t) for t in tiers)
        if pools[pool] and wanted(nd):
            opened.append((popcount(nd.free), owner.count(nd.idx), nd.idx))
    if res.prefer == "empty":
        opened.sort(key=lambda t: (-t[0], t[1], t[2]))
    else:
        opened.sort()
    return frozenset(ni for _f, _j, ni in opened[:k])


def _wanted(res: Reserve, tiers: set[int], kinds: set[tuple[str | None, int]],
            pending: dict[str, PendingInfo]) -> Callable[[NodeInfo], bool] | None:
    """Which nodes a big shard of the reserve's ``tiers`` (one the node takes:
    Reserve.takes, as _keep_off asks) could use: a candidate node of such a pending
    job, or a node of a kind (GPU type and size) in ``kinds``, those such a running
    job runs on. None when there is no such job."""
    lists: dict[tuple[int, int], list[int]] = {}  # (candidates list, shard) -> list
    for i in pending.values():
        if i.job.tier in tiers and i.candidates:
            lists.setdefault((id(i.candidates), i.job.gpus_per_node), i.candidates)
    if not kinds and not lists:
        return None
    sets: dict[int, frozenset[int]] = {}  # (made for the few open nodes asked about)

    def hosts(nd: NodeInfo) -> bool:
        for (lid, gpn), cands in lists.items():
            if res.takes(gpn, nd.node.gpus):
                if lid not in sets:
                    sets[lid] = frozenset(cands)
                if nd.idx in sets[lid]:
                    return True
        return False

    return lambda nd: (nd.node.gpu_type, nd.node.gpus) in kinds or hosts(nd)


def _keep_off(policy: Policy, nodes: list[NodeInfo], pending: dict[str, PendingInfo],
              reserved: frozenset[int], spent: bool = False) -> None:
    """Take the ``reserved`` nodes out of the candidate nodes of every pending job
    but the reserve's tiers' jobs whose shards take at least min_shard_fraction of
    a node's GPUs (there). When the rolling window has nothing left (``spent``: R15's
    B - H <= 0, each eviction now past the budget), a smaller shard of the reserve's
    tiers keeps the reserved nodes that hold running jobs (their free GPUs, so that it
    need not evict, or their jobs as victims, as on any node), and the wholly free
    nodes stay for big shards. Jobs of one shard size and candidate list share a
    list."""
    res = policy.reserve
    assert res is not None
    tiers = set(res.tiers)
    offs: dict[int, frozenset[int]] = {}  # shard size of a reserve tier's job (0: others)
    cut: dict[tuple[int, frozenset[int]], list[int]] = {}
    # (shard size, candidate list) -> the list without its nodes kept off (None: the
    # same list): jobs of one shape share both
    done: dict[tuple[int, int], list[int] | None] = {}
    for info in pending.values():
        j = info.job
        size = j.gpus_per_node if j.tier in tiers else 0
        which = (size, id(info.candidates))
        if which in done:
            hit = done[which]
        else:
            off = offs.get(size)
            if off is None:
                off = offs[size] = reserved if not size else frozenset(
                    ni for ni in reserved if not res.takes(size, nodes[ni].node.gpus)
                    and not (spent and nodes[ni].held))
            hit = None
            if off:
                key = (id(info.candidates), off)
                hit = cut.get(key)
                if hit is None:
                    hit = cut[key] = _without(info.candidates, off)
            done[which] = hit
        if hit is not None:
            info.candidates = hit


def _without(cands: list[int], off: frozenset[int]) -> list[int]:
    """The sorted node list ``cands`` less the nodes of ``off``, in order: the runs
    between them copied as slices (a few hundred reserved nodes among thousands of
    candidates: 53 lists of up to 12,500 nodes at 12,500 nodes)."""
    out: list[int] = []
    start, end = 0, len(cands)
    for ni in sorted(off):
        i = bisect_left(cands, ni, start)
        if i < end and cands[i] == ni:
            out += cands[start:i]
            start = i + 1
    out += cands[start:]
    return out


def host_kind(nd: NodeInfo) -> tuple:
    """All node_can_host reads of a node: nodes of one kind get the same answer for
    every job."""
    n = nd.node
    return (n.state, n.gpus, n.gpu_type, n.pool, n.block is None, n.nvlink_domain is None,
            nd.layout)


def _kinds(nodes: list[NodeInfo]) -> dict[tuple, list[int]]:
    """Node indices by what node_can_host looks at (host_kind)."""
    kinds: dict[tuple, list[int]] = {}
    for nd in nodes:
        kinds.setdefault(host_kind(nd), []).append(nd.idx)
    return kinds


def patience_until(policy: Policy, now: datetime, job: Job) -> datetime | None:
    """R16: until when a pending job may take only free GPUs (None: it has waited its
    tier's ``preempt_after_s``, or its queue start is unknown)."""
    wait = policy.tier(job.tier).preempt_after_s
    start = job.queue_start()
    if wait <= 0 or start is None:
        return None
    until = start + timedelta(seconds=wait)
    return until if now < until else None


def ending_soon(policy: Policy, now: datetime, job: Job) -> float | None:
    """R17: the seconds until a running job's ``expected_end_at`` when that is within
    ``spare_ending_within_s`` (then it is not evicted), else None."""
    within = policy.spare_ending_within_s
    if within <= 0 or job.expected_end_at is None:
        return None
    left = (job.expected_end_at - now).total_seconds()
    return left if 0 <= left <= within else None


def thrash_budget(snap: Snapshot, running: int) -> ThrashBudget | None:
    """R15: B from the running jobs that are not ignored, H from ``recent_evictions``
    with ``now - window_s <= at < now``."""
    th = snap.policy.thrash
    if th is None:
        return None
    now = snap.now
    start = now - timedelta(seconds=th.window_s)
    counted = [e for e in snap.recent_evictions if start <= e.at < now]
    oldest = min(e.at for e in counted) + timedelta(seconds=th.window_s) if counted else None
    live = sum(n.gpus for n in snap.nodes if n.state in ("up", "drain"))
    return ThrashBudget(th.limit(running), len(counted), frozenset(th.exempt_tiers),
                        float(th.window_s), running, oldest, th.gpu_limit(live),
                        sum(e.gpus or 0 for e in counted), th.exempt_if == "all",
                        float(th.past_budget_gpu_s))


def node_can_host(ni: NodeInfo, job: Job, policy: Policy) -> bool:
    """Could one shard of the job go on this node if it were empty (R1, R3, R4)?"""
    n = ni.node
    if n.state != "up" or n.gpus < job.gpus_per_node:
        return False
    if job.gpu_type is not None and n.gpu_type != job.gpu_type:
        return False
    if not policy.pool_admits(n.pool, job.tier):
        return False
    if job.same_block and n.block is None:
        return False
    if job.same_nvlink_domain and n.nvlink_domain is None:
        return False
    need = job.topology == "nvlink" and job.gpus_per_node > 1
    return ni.fits(ni.full, job.gpus_per_node, need)


def _iso(t: datetime | None) -> str:
    return "unknown" if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _dur(seconds: float) -> str:
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {(s % 3600) // 60} min"


def fmt_duration(seconds: float) -> str:
    return _dur(seconds)
