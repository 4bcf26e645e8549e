"""Why a pending job was not started: a reason code from the contract and a
sentence a user understands, found by direct reasoning over the snapshot.

The order of the checks follows the rules: backoff (R9) first, then whether any
node could host the job at all, then what would have to be evicted and what
protects it (R5-R8, R10, R11, R13, R15-R17); when it could have fit, the capacity went to
more valuable jobs (OUTRANKED).
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from models import Deferred, Job
from models.rules import gang_group, keeps_group
from planner.core import topology as topo
from planner.core.decision import Decision, exempt_victims, preemptors_of, used_gpus
from planner.core.problem import (
    PendingInfo,
    Problem,
    fmt_duration,
    host_kind,
    node_can_host,
)


def shape(job: Job) -> str:
    """What a job needs, in words: ``needs 2 nodes x 8 GPUs (H100, NVLink)``."""
    gpus = f"{job.gpus_per_node} GPU" + ("s" if job.gpus_per_node > 1 else "")
    s = gpus if job.nodes == 1 else f"{job.nodes} nodes x {gpus}"
    extra = []
    if job.gpu_type:
        extra.append(job.gpu_type)
    if job.topology == "nvlink" and job.gpus_per_node > 1:
        extra.append("NVLink")
    if job.same_block:
        extra.append("one block")
    if job.same_nvlink_domain:
        extra.append("one NVLink domain")
    return f"needs {s}" + (f" ({', '.join(extra)})" if extra else "")


def _enough(problem: Problem, info: PendingInfo, hosts: Iterable[int]) -> bool:
    """Do ``hosts`` hold the job's shards (distinct nodes, in one block or NVLink
    domain when it asks for that)? Stops at the first node that makes enough."""
    job = info.job
    if not keeps_group(job):
        return any(k + 1 >= job.nodes for k, _i in enumerate(hosts))
    keys = _group_keys(problem, job)
    groups: dict[tuple, int] = {}
    for i in hosts:
        key = keys[i]
        groups[key] = groups.get(key, 0) + 1
        if groups[key] >= job.nodes:
            return True
    return False


def _group_keys(problem: Problem, job: Job) -> list[tuple]:
    """Each node's gang_group for jobs asking what ``job`` asks (one block, one NVLink
    domain), by node index (shared by every such job)."""
    ask = (job.same_block, job.same_nvlink_domain)
    return _once(problem, ("group keys", ask),
                 lambda: [gang_group(nd.node, job) for nd in problem.nodes])


def _cache(problem: Problem) -> dict:
    """Per-problem memo: deferred jobs of one shape share their answers."""
    return problem.__dict__.setdefault("_explain_cache", {})


def forget(problem: Problem) -> None:
    """Drop the memo: some answers depend on the decision being explained."""
    problem.__dict__.pop("_explain_cache", None)


def _once(problem: Problem, key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()``, kept in the per-problem memo under ``key``."""
    memo = _cache(problem)
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def _shape(info: PendingInfo) -> tuple:
    """All a sentence reads of a pending job but its id (tier and rights for R7, the
    cascade guard, candidate nodes, shape): jobs that agree on it share sentences."""
    j = info.job
    return (j.tier, info.rights, info.guarded, id(info.candidates), j.gpus_per_node,
            info.need_nvlink, j.nodes, j.same_block, j.same_nvlink_domain, j.gpu_type)


def _node_table(problem: Problem) -> tuple[np.ndarray, np.ndarray, list[topo.Layout]]:
    """Per node (by index, which is the order of node ids): its free GPUs (masks),
    the code of its NVLink layout, and the layouts by code. Masks of nodes of up to
    62 GPUs are int64, of wider nodes Python ints (an object array)."""
    def compute() -> tuple[np.ndarray, np.ndarray, list[topo.Layout]]:
        nodes = problem.nodes
        wide = any(nd.node.gpus > _NARROW for nd in nodes)
        free = np.array([nd.free for nd in nodes], dtype=object if wide else np.int64)
        codes: dict[int, int] = {}
        layouts: list[topo.Layout] = []
        for nd in nodes:
            if codes.setdefault(id(nd.layout), len(codes)) == len(layouts):
                layouts.append(nd.layout)
        code = np.fromiter((codes[id(nd.layout)] for nd in nodes), np.int64, len(nodes))
        return free, code, layouts

    return _once(problem, ("nodes",), compute)


_NARROW = 62  # GPUs of the widest node whose masks fit an int64


def _counts(masks: np.ndarray) -> np.ndarray:
    """The GPUs in each mask."""
    if masks.dtype != object and hasattr(np, "bitwise_count"):
        return np.bitwise_count(masks).astype(np.int64)
    return np.fromiter((int(m).bit_count() for m in masks), np.int64, len(masks))


def _avail(problem: Problem, info: PendingInfo, mode: str) -> np.ndarray:
    """Per node, free GPUs plus, per mode, GPUs of running jobs that could be let go:
    "free" none, "rightful" evictable jobs of tiers the job may preempt, "stormy"
    those plus jobs protected only by the storm rule (R11), "ending" those plus jobs
    protected only because they end soon (R17). Masks by node index (read only)."""
    def compute() -> np.ndarray:
        out = _node_table(problem)[0].copy()
        if mode != "free":
            for tier, m in _let_go(problem, mode).items():
                if tier in info.rights:
                    out |= m
        return out

    return _once(problem, ("avail", mode, info.rights), compute)


def _let_go(problem: Problem, mode: str) -> dict[int, np.ndarray]:
    """Per tier, per node, the GPUs of running jobs that ``_avail``'s mode lets go
    (shared by every tier's rights)."""
    def compute() -> dict[int, np.ndarray]:
        # the evictable jobs ("") and those protected only by R11 or R17, per tier and
        # node (tallied as the problem was built)
        parts = problem.let_go()
        rule = {"stormy": "R11", "ending": "R17"}.get(mode)
        free = _node_table(problem)[0]
        out: dict[int, np.ndarray] = {}
        for part in ("", rule) if rule is not None else ("",):
            for tier, by_node in parts[part].items():
                m = np.zeros_like(free)
                m[np.fromiter(by_node, np.int64, len(by_node))] = list(by_node.values())
                out[tier] = out[tier] | m if tier in out else m
        return out

    return _once(problem, ("let go", mode), compute)


def _fits_with(problem: Problem, info: PendingInfo, mode: str) -> bool:
    """Could the job be placed (all its shards) on the GPUs ``_avail`` gives?"""
    j = info.job
    key = ("fits", mode, info.rights, id(info.candidates), j.gpus_per_node, info.need_nvlink,
           j.nodes, j.same_block, j.same_nvlink_domain)

    def compute() -> bool:  # (_enough's answer does not depend on the nodes' order)
        hosts, inside = _hosts(problem, info, mode), problem.candidate_set(info)
        few, many = (hosts, inside) if len(hosts) <= len(inside) else (inside, hosts)
        return _enough(problem, info, (i for i in few if i in many))

    return _once(problem, key, compute)


def _hosts(problem: Problem, info: PendingInfo, mode: str) -> frozenset[int]:
    """The nodes on which one shard of the job fits on the GPUs ``_avail`` gives
    (shared by jobs of every candidate list; nodes of one layout and the same GPUs
    available are asked once)."""
    gpn, nvlink = info.job.gpus_per_node, info.need_nvlink

    def alike() -> tuple[list[tuple[int, int]], np.ndarray]:
        # the (layout code, GPUs available) pairs, and each node's pair
        code, avail = _node_table(problem)[1], _avail(problem, info, mode)
        if not len(code):
            return [], code
        if avail.dtype != object:
            order = np.lexsort((avail, code))
            c, m = code[order], avail[order]
            new = np.ones(len(order), bool)
            new[1:] = (c[1:] != c[:-1]) | (m[1:] != m[:-1])
            inverse = np.empty(len(order), np.int64)
            inverse[order] = np.cumsum(new) - 1
            return list(zip(c[new].tolist(), m[new].tolist(), strict=True)), inverse
        seen: dict[tuple[int, int], int] = {}
        inverse = np.fromiter((seen.setdefault((int(c), m), len(seen))
                               for c, m in zip(code, avail, strict=True)), np.int64, len(code))
        return list(seen), inverse

    def compute() -> frozenset[int]:
        pairs, inverse = _once(problem, ("alike", mode, info.rights), alike)
        layouts, fits = _node_table(problem)[2], topo.layout_fits
        ok = np.fromiter((fits(layouts[c], m, gpn, nvlink) for c, m in pairs), bool, len(pairs))
        return frozenset(np.flatnonzero(ok[inverse]).tolist())

    return _once(problem, ("hosts", mode, info.rights, gpn, nvlink), compute)


def _no_fit_detail(problem: Problem, info: PendingInfo) -> str:
    """Why no node could host the job even if empty; jobs of one shape and tier share
    the sentence (it scans every node: 600 such jobs took 0.4 s at 1,024 nodes)."""
    return _once(problem, ("no fit", *_shape(info)), lambda: _no_fit_uncached(problem, info))


def _no_fit_uncached(problem: Problem, info: PendingInfo) -> str:
    job = info.job
    up = [n for n in problem.nodes if n.node.state == "up"]
    typed = [n for n in up if job.gpu_type is None or n.node.gpu_type == job.gpu_type]
    pooled = [n for n in typed if problem.policy.pool_admits(n.node.pool, job.tier)]
    sized = [n for n in pooled if n.node.gpus >= job.gpus_per_node]
    why = []
    if not up:
        why.append("no node is up")
    elif job.gpu_type and not typed:
        why.append(f"no up node has GPU type {job.gpu_type}")
    elif not pooled:
        why.append(f"no up node of that type is in a pool admitting tier {job.tier}")
    elif not sized:
        why.append(f"no admitting node has {job.gpus_per_node} GPUs")
    elif not info.candidates:
        why.append("no admitting node has that many GPUs linked by NVLink"
                   if info.need_nvlink else "no node qualifies (block / NVLink domain unset)")
    else:
        why.append(f"only {len(info.candidates)} node(s) qualify"
                   + (" (and not enough within one block or domain)"
                      if job.same_block or job.same_nvlink_domain else ""))
    return f"{shape(job)}; {'; '.join(why)}, even if empty (R1-R4)"


def _protectors(problem: Problem, info: PendingInfo) -> str:
    """Name the nodes that come closest and the jobs that protect them. A node comes
    close when its free GPUs and those of jobs the job may evict ("rightful") hold
    a shard, or nearly; for a gang that must keep one block or NVLink domain, first
    the group with the most such nodes, and then what keeps the rest."""
    return _once(problem, ("protectors", *_shape(info)),
                 lambda: _protectors_uncached(problem, info))


def _protectors_uncached(problem: Problem, info: PendingInfo) -> str:
    job = info.job
    nodes = problem.nodes
    avail = _avail(problem, info, "rightful")
    # could host a shard by evicting only what the job may
    hosts = _hosts(problem, info, "rightful")
    ok = hosts.intersection(info.candidates)
    grouped = keeps_group(job)

    def by_group() -> dict[tuple, list[int]]:  # (shared by the shapes of one candidate list)
        out: dict[tuple, list[int]] = {}
        keys = _group_keys(problem, job)
        for i in info.candidates:
            out.setdefault(keys[i], []).append(i)
        return out

    groups: dict[tuple, list[int]] = (
        _once(problem, ("groups", id(info.candidates), job.same_block,
                        job.same_nvlink_domain), by_group) if grouped
        else {(): info.candidates} if info.candidates else {})
    big = [k for k, members in groups.items() if len(members) >= job.nodes] or list(groups)
    # the group with the most nodes that could host a shard, then the most GPUs there
    counts = _once(problem, ("counts", info.rights), lambda: _counts(avail))
    if len(big) == 1:
        key = big[0]
    else:  # (only a grouped job's groups are more than one)
        def labelled() -> tuple[dict[tuple, int], np.ndarray, np.ndarray]:
            at = {k: x for x, k in enumerate(groups)}
            sizes = [len(m) for m in groups.values()]
            return (at, np.fromiter(itertools.chain.from_iterable(groups.values()), np.int64,
                                    sum(sizes)), np.repeat(np.arange(len(at)), sizes))

        at, members, labels = _once(problem, ("labels", id(info.candidates), job.same_block,
                                              job.same_nvlink_domain), labelled)
        hit = np.zeros(len(nodes), np.int64)
        hit[np.fromiter(ok, np.int64, len(ok))] = 1
        n_ok = np.bincount(labels, weights=hit[members], minlength=len(at)).tolist()
        n_gpus = np.bincount(labels, weights=counts[members], minlength=len(at)).tolist()
        key = min(big, key=lambda k: (-n_ok[at[k]], -n_gpus[at[k]], str(k)))
    members = groups.get(key, [])
    good = len(ok) if members is info.candidates else sum(i in ok for i in members)
    # the two nodes of the group, not among those, with the most GPUs available
    # (most GPUs first, then by id: node indices are in id order, and the sort is stable)
    rank = _once(problem, ("rank", info.rights),
                 lambda: np.argsort(-counts, kind="stable").tolist())
    inside = problem.candidate_set(info) if members is info.candidates else set(members)
    best = list(itertools.islice((i for i in rank if i in inside and i not in ok), 2))
    names = [nodes[i].node.id for i in best]
    # the running jobs on those nodes (the problem's GPU holders: a look-up per node)
    running = problem.running
    near = sorted({jid: running[jid] for i in best
                   for jid, _m in problem.owner.on(i, nodes[i].full)}.items())
    why_of: dict[tuple[int, str], list[str]] = {}  # (tier, why) -> protected job ids
    for _id, v in near:
        if not v.evictable:
            why = f"{v.why_not} ({v.rule})"
        elif v.job.tier not in info.rights:
            why = (f"tier {job.tier} may not preempt tier {v.job.tier} (R7)" if not info.guarded
                   else "cascade guard (R10)")
        else:
            continue
        why_of.setdefault((v.job.tier, why), []).append(v.job.id)
    blockers = [f"{_tier_jobs(tier, ids)}, {why}"
                for (tier, why), ids in list(why_of.items())[:3]]
    where = _names(names) if names else "no node"
    evicting = "evicting " + ("; ".join(blockers) if blockers else "protected jobs")
    if job.nodes == 1:
        return f"{shape(job)}; {where} could free them only by {evicting}"
    block, domain = key if grouped else (None, None)
    group = " and ".join(x for x in (f"block {block}" if block is not None else "",
                                     f"NVLink domain {domain}" if domain is not None else "") if x)
    return (f"{shape(job)}; {group + ' comes closest: ' if group else ''}{good} of the "
            f"{job.nodes} nodes it needs {'is' if good == 1 else 'are'} free or could be freed; "
            f"the next closest, {where}, could free theirs only by {evicting}")


def _takers(problem: Problem, info: PendingInfo, d: Decision) -> str:
    """Say who took the free GPUs that could have held the job: up to two candidate
    nodes whose free GPUs hold a shard, and the jobs this plan places there. Jobs of
    one shape share the sentence (it scans the candidate nodes: at twice the Philly
    load, 800 deferred jobs a tick, this took half of a greedy plan's time)."""
    job, nodes = info.job, problem.nodes

    def compute() -> str:
        room = (i for i in info.candidates
                if nodes[i].fits(nodes[i].free, job.gpus_per_node, info.need_nvlink))
        who = _who_took(problem, d, room)
        if who is None:
            return "the free capacity went to more valuable jobs"
        return f"the free GPUs that could hold it went to more valuable jobs: {who}"

    return _once(problem, ("takers", id(info.candidates), job.gpus_per_node, info.need_nvlink),
                 compute)


def _who_took(problem: Problem, d: Decision, room: Iterable[int]) -> str | None:
    """For the first two of the nodes ``room`` on which the plan places jobs: "on n1
    and n2 to tier-1 job a; ..." (None when it places nothing on any of them)."""
    memo = _cache(problem)
    if "placed_on" not in memo:  # node -> jobs this decision places on it, in id order
        on: dict[int, list[str]] = {}
        for j in sorted(d.placements):
            for i, _m in d.placements[j]:
                on.setdefault(i, []).append(j)
        memo["placed_on"] = on
    where: dict[tuple[str, ...], list[str]] = {}  # jobs placed -> nodes, two nodes at most
    for i in room:
        taken = memo["placed_on"].get(i)
        if taken:
            where.setdefault(tuple(taken), []).append(problem.nodes[i].node.id)
            if sum(map(len, where.values())) == 2:
                break
    if not where:
        return None
    said = []
    for taken, ids in where.items():
        by_tier: dict[int, list[str]] = {}
        for j in taken:
            by_tier.setdefault(problem.pending[j].job.tier, []).append(j)
        who = _names([_tier_jobs(t, js) for t, js in sorted(by_tier.items())])
        said.append(f"on {_names(ids)} to {who}")
    return "; ".join(said)


GANG_COMBINATIONS = 500  # node sets a gang's storm check looks at before it gives up


def _gang_overloads(problem: Problem, info: PendingInfo, opts: list[tuple[int, list]],
                    over: list[set[str]], overloaded: Callable[[list], set[str]]) -> bool:
    """For a gang: is the storm limit what keeps it from the node options ``opts``
    (``over``: the storage targets each overloads alone)? True when some block or
    NVLink domain (the whole cluster for a gang that keeps none) holds ``nodes`` of
    them, and in each that does every set of ``nodes`` of those within the limit
    alone overloads a target together (or there are too few of those). False where no
    block or domain holds that many options (the nodes it lacks were taken, not kept
    from it by the storm limit) or there are too many sets to look at
    (GANG_COMBINATIONS): then it is not said to be a storm."""
    job = info.job
    groups: dict[tuple, list[tuple[tuple[int, list], set[str]]]] = {}
    keys = _group_keys(problem, job) if keeps_group(job) else None
    for o, x in zip(opts, over, strict=True):
        groups.setdefault(keys[o[0]] if keys is not None else (), []).append((o, x))
    looked = 0
    held = False  # some block or domain holds the gang's nodes, the storm limit aside
    for members in groups.values():
        if len(members) < job.nodes:
            continue
        held = True
        for combo in itertools.combinations([o for o, x in members if not x], job.nodes):
            looked += 1
            if looked > GANG_COMBINATIONS:
                return False
            vs = list({v.job.id: v for _i, victims in combo for v in victims}.values())
            if not overloaded(vs):
                return False
    return held


def _exempt_of(problem: Problem, d: Decision) -> set[str]:
    """R15: the exempt victims of decision ``d`` (kept per decision)."""
    return _once(problem, ("exempt", d is _NOTHING),
                 lambda: exempt_victims(problem, preemptors_of(problem, d)))


def _iso(t: datetime | None) -> str:
    return "unknown" if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _names(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _tier_jobs(tier: int, ids: list[str]) -> str:
    """``tier-2 job a``, ``tier-2 jobs a and b``, ``tier-2 jobs a, b, c and 2 more``."""
    listed = ids if len(ids) <= 3 else ids[:3] + [f"{len(ids) - 3} more"]
    return f"tier-{tier} job{'s' if len(ids) > 1 else ''} {_names(listed)}"


def deferred_entries(problem: Problem, d: Decision, loads: dict[str, float],
                     late: dict[str, str]) -> list[Deferred]:
    """The deferral of each pending job ``d`` does not place, in the order of ids: its
    reason and detail. ``late`` (job -> "none" or "free"): the planner's time limit
    ended before it considered the job ("none") or before it considered evictions
    for it ("free": it found too few free GPUs). Where nodes kept open by
    ``policy.reserve`` had free GPUs for a shard of it, the detail says so."""
    memo = _cache(problem)
    placed = d.placements
    pending = problem.pending
    out = []
    for jid in sorted(pending):  # (in the order of ids already: a pass)
        if jid in placed:
            continue
        info = pending[jid]
        why = late.get(jid)
        if info.held_until is None and not info.guarded and info.patient_until is None:
            # every answer below is the same for the jobs of one shape (_shape) and the
            # same ``late`` (those of R9, R10 and R16 name the job's own times):
            # worked out once, then copied with the job's id (a flooded queue has
            # 100,000 deferred jobs of a few shapes)
            key = ("deferral", why, *_shape(info))
            said = memo.get(key)
            if said is None:
                said = memo[key] = _deferral(problem, info, d, loads, why)
            out.append(Deferred(job=jid, reason=said.reason, until=said.until,
                                detail=said.detail))
        else:
            out.append(_deferral(problem, info, d, loads, why))
    return out


def _deferral(problem: Problem, info: PendingInfo, d: Decision, loads: dict[str, float],
              late: str | None) -> Deferred:
    out = _deferred_entry(problem, info, d, loads, late=late)
    if problem.reserved and out.reason != "COOLDOWN":
        note = _reserved_note(problem, info)
        if note:
            out = out.model_copy(update={"detail": f"{out.detail}; {note}"})
    return out


def _reserved_note(problem: Problem, info: PendingInfo) -> str:
    """The reserved nodes (policy.reserve) kept from the job that have free GPUs for
    one of its shards, in a sentence ("" when none)."""
    job = info.job

    def fit() -> list[int]:  # the reserved nodes with free GPUs for a shard of the job
        nodes = problem.nodes
        out: list[int] = []
        for members in _reserved_kinds(problem):  # (one answer per kind of node)
            nd = nodes[members[0]]
            if (node_can_host(nd, job, problem.policy)
                    and nd.fits(nd.free, job.gpus_per_node, info.need_nvlink)):
                out += members
        return sorted(out)

    kind = (job.tier, job.gpu_type, job.gpus_per_node, job.topology, job.same_block,
            job.same_nvlink_domain, info.need_nvlink)

    def compute() -> str:
        # (the candidate nodes are in index order: a few hundred reserved nodes are
        # looked up there, where a set of every candidate node took longer to make)
        cands = info.candidates
        fitting = _once(problem, ("reserved fit", *kind), fit)
        room = sorted(problem.nodes[ni].node.id for ni in fitting
                      if (k := bisect_left(cands, ni)) == len(cands) or cands[k] != ni)
        if not room:
            return ""
        res = problem.policy.reserve
        assert res is not None
        tiers = ", ".join(str(t) for t in res.tiers)
        listed = room if len(room) <= 3 else [*room[:3], f"{len(room) - 3} more"]
        one = len(room) == 1
        return (f"{_names(listed)} {'has' if one else 'have'} free GPUs for it but "
                f"{'is' if one else 'are'} kept open for tier {tiers} jobs taking at least "
                f"{100 * res.min_shard_fraction:g}% of a node's GPUs (policy.reserve)")

    # (the same sentence for every job of a kind on one candidate list)
    return _once(problem, ("reserved", id(info.candidates), *kind), compute)


def _reserved_kinds(problem: Problem) -> list[list[int]]:
    """The reserved nodes in groups that node_can_host and NodeInfo.fits on the
    node's free GPUs cannot tell apart (their host_kind and free GPUs), each in index
    order."""
    def compute() -> list[list[int]]:
        groups: dict[tuple, list[int]] = {}
        for ni in sorted(problem.reserved):
            nd = problem.nodes[ni]
            groups.setdefault((host_kind(nd), nd.free), []).append(ni)
        return list(groups.values())

    return _once(problem, ("reserved kinds",), compute)


def _deferred_entry(problem: Problem, info: PendingInfo, d: Decision,
                    loads: dict[str, float], *, late: str | None = None) -> Deferred:
    job = info.job
    pol = problem.policy
    if info.held_until is not None:
        hold = pol.backoff.cooldown(job.preemptions)
        return Deferred(job=job.id, reason="COOLDOWN", until=info.held_until,
                        detail=f"preempted {job.preemptions} time(s); held {hold:.0f} s after "
                               f"the last preemption (R9)")
    if not _enough(problem, info, info.candidates):
        return Deferred(job=job.id, reason="NO_FIT", detail=_no_fit_detail(problem, info))
    if late == "none":
        return Deferred(job=job.id, reason="OUTRANKED",
                        detail=f"{shape(job)}; not considered: the time limit ended while "
                               "the jobs before it (higher tiers first) were being placed")
    if late == "free":
        return Deferred(job=job.id, reason="OUTRANKED",
                        detail=f"{shape(job)}; too few free GPUs were left for it, and the "
                               "time limit ended before evictions for it were considered "
                               "(the jobs before it, higher tiers first, were)")
    if _fits_with(problem, info, "free"):
        return Deferred(job=job.id, reason="OUTRANKED",
                        detail=f"{shape(job)}; {_takers(problem, info, d)}")
    if info.guarded:
        assert job.last_preempted_at is not None  # (the guard counts from it)
        ago = (problem.now - job.last_preempted_at).total_seconds()
        return Deferred(job=job.id, reason="CASCADE_GUARD",
                        detail=f"{shape(job)}; preempted {fmt_duration(ago)} ago, so within the "
                               f"cascade guard of {pol.cascade_guard_s:.0f} s it may use only "
                               "free GPUs, and not enough are free (R10)")
    if info.patient_until is not None:
        start = job.queue_start()
        assert start is not None
        queued = (problem.now - start).total_seconds()
        wait = pol.tier(job.tier).preempt_after_s
        return Deferred(job=job.id, reason="PATIENCE", until=info.patient_until,
                        detail=f"{shape(job)}; queued for {fmt_duration(queued)}, so until it "
                               f"has waited tier {job.tier}'s preempt_after_s of "
                               f"{fmt_duration(wait)} it may use only free GPUs, and not "
                               "enough are free (R16)")
    if _fits_with(problem, info, "rightful"):
        return _why_not_taken(problem, info, d, loads)
    if _fits_with(problem, info, "stormy"):
        return Deferred(job=job.id, reason="STORM",
                        detail=f"{shape(job)}; the jobs it would evict have checkpoints too big "
                               f"to flush within grace.max_s {pol.grace.max_s:.0f} s (R11/R12)")
    if _fits_with(problem, info, "ending"):
        return _ending_soon(problem, info)
    return Deferred(job=job.id, reason="PROTECTED", detail=_protectors(problem, info))


def _ending_soon(problem: Problem, info: PendingInfo) -> Deferred:
    """ENDING_SOON: the job could fit only with GPUs of jobs spared because they end
    soon (R17); until the earliest time one node it could use has them all back."""
    def compute() -> Deferred:
        job, nodes = info.job, problem.nodes
        rightful = _avail(problem, info, "rightful")
        ending: dict[int, list] = {}
        for v in problem.running_any_order():
            if v.rule == "R17" and v.job.tier in info.rights:
                for i, _m in v.parts:
                    ending.setdefault(i, []).append(v)
        best = None  # (time all its ending jobs are gone, node id, those jobs)
        for i in info.candidates:
            if i in ending and not nodes[i].fits(int(rightful[i]), job.gpus_per_node,
                                                info.need_nvlink):
                end = max(v.job.expected_end_at for v in ending[i])
                cand = (end, nodes[i].node.id, sorted(v.job.id for v in ending[i]))
                if best is None or cand < best:
                    best = cand
        assert best is not None
        end, node, ids = best
        return Deferred(job="", reason="ENDING_SOON", until=end,
                        detail=f"{shape(job)}; it waits for {node}, where "
                               f"{_tier_jobs(problem.running[ids[0]].job.tier, ids)} "
                               f"{'is' if len(ids) == 1 else 'are'} expected to end by "
                               f"{_iso(end)} and so not evicted "
                               f"(spare_ending_within_s {problem.policy.spare_ending_within_s:.0f} s, R17)")

    said = _once(problem, ("ending", *_shape(info)), compute)
    return said.model_copy(update={"job": info.job.id})


_NOTHING = Decision()  # "as if nothing else happened this tick"
# answers next to a plan start from those "as if nothing else happened", worked out
# again only on the nodes the plan places on or evicts from (False: on every node)
DERIVED = True


def _node_options(problem: Problem, info: PendingInfo, d: Decision) -> list[tuple[int, list]]:
    """Per candidate node, the fewest further allowed victims (largest first) that make
    one shard fit next to this tick's placements: (node, victims)."""
    key = ("options", d is _NOTHING, info.rights, id(info.candidates), info.job.gpus_per_node,
           info.need_nvlink)
    return _once(problem, key, lambda: _node_options_uncached(problem, info, d))


def _node_options_uncached(problem: Problem, info: PendingInfo,
                           d: Decision) -> list[tuple[int, list]]:
    # per node, shared by the candidate lists of one size, rights and decision
    rights, gpn, nvlink = info.rights, info.job.gpus_per_node, info.need_nvlink
    per_node = _once(problem, ("options by node", d is _NOTHING, rights, gpn, nvlink), dict)
    # a node the decision neither places on nor evicts from has the answer it has
    # "as if nothing else happened": taken from there, and given there
    alone: dict | None = None
    touched: frozenset[int] = frozenset()
    if d is not _NOTHING and DERIVED:
        alone = _once(problem, ("options by node", True, rights, gpn, nvlink), dict)
        touched = _touched(problem, d)
    used, by_node, already = _victims_by_node(problem, d)
    out = []
    nodes = problem.nodes
    fits = topo.layout_fits
    missing = _NO_ANSWER
    for i in info.candidates:
        chosen = per_node.get(i, missing)
        if chosen is missing:
            if alone is not None and i not in touched and i in alone:
                chosen = per_node[i] = alone[i]
            else:
                layout = nodes[i].layout
                taken = used.get(i, 0)
                avail = nodes[i].free
                for tier, m in already.get(i, ()):
                    if tier in rights:
                        avail |= m
                avail &= ~taken
                chosen = []
                # (without NVLink a shard fits any GPUs enough in number)
                ok = fits(layout, avail, gpn, True) if nvlink else avail.bit_count() >= gpn
                for v, m in by_node.get(i, ()):
                    if ok:
                        break
                    if v.job.tier not in rights:
                        continue
                    avail |= m & ~taken
                    chosen.append(v)
                    ok = fits(layout, avail, gpn, True) if nvlink else avail.bit_count() >= gpn
                if not ok:
                    chosen = None
                per_node[i] = chosen
                if alone is not None and i not in touched:
                    alone[i] = chosen
        if chosen is not None:
            out.append((i, chosen))
    return out


_NO_ANSWER: Any = object()  # (no answer kept yet for a node: its options are None or a list)


def _victims_by_node(problem: Problem, d: Decision) -> tuple[
        dict[int, int], dict[int, list], dict[int, list[tuple[int, int]]]]:
    """Next to decision ``d``: the GPUs its placements take per node; per node the
    evictable running jobs it does not evict, as (victim, GPUs there), largest
    first, then cheapest, then by id; and per node the (tier, GPUs) its victims
    free. Shared by every shape (it scans every running job)."""
    def derived() -> tuple[dict[int, int], dict[int, list], dict[int, list[tuple[int, int]]]]:
        # from the answer for no decision: only the nodes of d's victims differ there
        _u, alone, _a = _victims_by_node(problem, _NOTHING)
        by_node = dict(alone)
        already: dict[int, list[tuple[int, int]]] = {}
        victims = d.victims
        for vid in sorted(victims):
            v = problem.running.get(vid)
            if v is None or not v.evictable:
                continue
            for i, m in v.parts:
                already.setdefault(i, []).append((v.job.tier, m))
                if i in by_node:
                    by_node[i] = [vm for vm in by_node[i] if vm[0].job.id not in victims]
        return used_gpus(d), by_node, already

    def compute() -> tuple[dict[int, int], dict[int, list], dict[int, list[tuple[int, int]]]]:
        # from the problem's evictable jobs per node, cheapest first (cost, then id):
        # sorted again, stably, by GPUs on the node
        victims = d.victims
        by_node: dict[int, list] = {}
        already: dict[int, list[tuple[int, int]]] = {}
        for i, pairs in problem.victim_pairs_by_node().items():
            if victims:
                kept = []
                for v, m in pairs:
                    if v.job.id in victims:
                        already.setdefault(i, []).append((v.job.tier, m))
                    else:
                        kept.append((v, m))
            else:
                kept = list(pairs)
            if kept:
                kept.sort(key=lambda vm: -vm[1].bit_count())
                by_node[i] = kept
        return used_gpus(d), by_node, already

    return _once(problem, ("victims by node", d is _NOTHING),
                 compute if d is _NOTHING or not DERIVED else derived)


def _touched(problem: Problem, d: Decision) -> frozenset[int]:
    """The nodes decision ``d`` places jobs on or evicts jobs from."""
    def compute() -> frozenset[int]:
        out = {i for parts in d.placements.values() for i, _m in parts}
        for vid in d.victims:
            v = problem.running.get(vid)
            if v is not None:
                out.update(i for i, _m in v.parts)
        return frozenset(out)

    return _once(problem, ("touched",), compute)


def _why_not_taken(problem: Problem, info: PendingInfo, d: Decision,
                   loads: dict[str, float]) -> Deferred:
    """The job could fit by evicting jobs it may evict: budget, storm or outranked?"""
    job = info.job
    # first what the job would need on its own (as if nothing else happened this
    # tick), then what it would need next to this tick's plan
    alone = _why_blocked(problem, info, _NOTHING, {})
    if alone is not None:
        return alone
    blocked = _why_blocked(problem, info, d, loads)
    if blocked is not None:
        return blocked
    # the nodes where it could have made room on its own, and who has them now
    who = _who_took(problem, d, (i for i, _vs in _node_options(problem, info, _NOTHING)))
    if who is not None:
        return Deferred(job=job.id, reason="OUTRANKED",
                        detail=f"{shape(job)}; the GPUs it could free went to more valuable "
                               f"jobs: {who}")
    return Deferred(job=job.id, reason="OUTRANKED",
                    detail=f"{shape(job)}; the GPUs it could take went to more valuable jobs, "
                           "or freeing them costs more than it gains")


def _why_blocked(problem: Problem, info: PendingInfo, d: Decision,
                 loads: dict[str, float]) -> Deferred | None:
    """BUDGET or STORM when every way of making room breaks R13 or R11 given the
    decision ``d`` (its placements, victims and storm loads); None otherwise. Jobs of
    one shape, tier and rights get the same answer."""
    said = _once(problem, ("blocked", d is _NOTHING, *_shape(info)),
                 lambda: _why_blocked_uncached(problem, info, d, loads))
    return None if said is None else said.model_copy(update={"job": info.job.id})


def _why_blocked_uncached(problem: Problem, info: PendingInfo, d: Decision,
                          loads: dict[str, float]) -> Deferred | None:
    job = info.job
    pol = problem.policy
    opts = _node_options(problem, info, d)
    # the job.nodes options with the fewest victims, then GPUs (the first in order
    # among equals): those without victims when there are enough of them
    bare = list(itertools.islice((o for o in opts if not o[1]), job.nodes))
    need = bare if len(bare) == job.nodes else heapq.nsmallest(
        job.nodes, opts, key=lambda o: (len(o[1]), sum(v.job.total_gpus for v in o[1])))
    n_victims = sum(len(vs) for _i, vs in need)
    n_gpus = sum(v.job.total_gpus for _i, vs in need for v in vs)
    used = len(d.victims)
    used_gpus = sum(problem.running[v].job.total_gpus for v in d.victims)
    tb = problem.thrash
    if tb is not None and n_victims > 0:
        exempt = len(_exempt_of(problem, d))
        free_pass = problem.exempt(job.tier) and used == exempt
        frees = (f"; the oldest of them leaves the window at {_iso(tb.oldest)}"
                 if tb.oldest is not None else "")
        if not free_pass and used + n_victims > tb.left:
            left = max(0, tb.left - used)
            return Deferred(job=job.id, reason="THRASH_BUDGET", until=tb.oldest,
                            detail=f"{shape(job)}; it needs at least {n_victims} eviction(s) and "
                                   f"the rolling budget of {tb.limit} per "
                                   f"{fmt_duration(tb.window_s)} ({tb.recent} already in the "
                                   f"window{frees}, {used} in this plan) leaves {left} (R15)")
        if not free_pass and used_gpus + n_gpus > tb.gpus_left:
            left = max(0, int(tb.gpus_left) - used_gpus)
            return Deferred(job=job.id, reason="THRASH_BUDGET", until=tb.oldest,
                            detail=f"{shape(job)}; its evictions would free at least {n_gpus} "
                                   f"GPUs and the rolling budget of {tb.gpu_limit} GPUs per "
                                   f"{fmt_duration(tb.window_s)} ({tb.recent_gpus} already in "
                                   f"the window{frees}, {used_gpus} in this plan) leaves {left} "
                                   "(R15, thrash.max_gpu_fraction)")
    mx = pol.max_evictions_per_tick
    if mx is not None and n_victims > 0 and used + n_victims > mx:
        left = max(0, mx - used)
        return Deferred(job=job.id, reason="BUDGET",
                        detail=f"{shape(job)}; it needs at least {n_victims} eviction(s) and "
                               f"the budget of {mx} per tick leaves {left} (R13)")
    frac = pol.max_evicted_gpu_fraction
    if frac is not None and n_gpus > 0:
        limit = frac * problem.total_gpus_up_drain
        if used_gpus + n_gpus > limit + 1e-9:
            return Deferred(job=job.id, reason="BUDGET",
                            detail=f"{shape(job)}; evictions may free at most {limit:.0f} GPUs "
                                   f"this tick ({frac:.0%}), {used_gpus} already planned and it "
                                   f"needs {n_gpus} more (R13)")
    # storm: does every way of making room overload a storage target?
    caps: dict[str, float] = {}
    for v in d.victims:
        vi = problem.running[v]
        if vi.storage is not None and vi.flushing:
            caps[vi.storage] = min(caps.get(vi.storage, float("inf")), vi.storm_cap_gb)

    def overloaded(vs: list) -> set[str]:  # the storage targets these victims overload
        add: dict[str, float] = {}
        cap = dict(caps)
        for v in vs:
            if v.storage is not None and v.flushing:
                add[v.storage] = add.get(v.storage, 0.0) + v.flush_gb
                cap[v.storage] = min(cap.get(v.storage, float("inf")), v.storm_cap_gb)
        return {s for s, f in add.items() if loads.get(s, 0.0) + f > cap[s] + 1e-9}

    if len(opts) < job.nodes or (job.nodes == 1 and any(not overloaded(o[1]) for o in opts)):
        return None  # (a job of one node: one option within the limit will do)
    over = [overloaded(o[1]) for o in opts]
    if job.nodes == 1 or _gang_overloads(problem, info, opts, over, overloaded):
        # name the loaded targets that the ways of making room would overload
        busy = sorted({s for x in over for s in x if loads.get(s, 0.0) > 0})
        named = ", ".join(busy[:3]) + (f" and {len(busy) - 3} more" if len(busy) > 3 else "")
        where = f"to {named}, already loaded by this tick's evictions, " if busy else ""
        return Deferred(job=job.id, reason="STORM",
                        detail=f"{shape(job)}; its victims' checkpoints would have to flush "
                               f"{where}beyond what grace.max_s {pol.grace.max_s:.0f} s allows "
                               "(R11); retry next tick")
    return None
