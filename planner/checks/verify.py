"""Independent plan verifier: checks a plan against its snapshot.

Everything is recomputed from the snapshot and the plan: the rules R1-R13 of the
contract (section 4, with the readings of section 7), R15-R17 (section 9) and the formulas of the plan
(section 6). Nothing here comes from the planner (not even the NVLink helpers:
connectivity is re-derived below); only the contract's shared formulas in
``models.rules`` are used. The tests, the fallback path and the solver hints all
run plans through ``verify``, so a planner bug shows up as a cited rule.

Rule codes: ``R1``..``R13`` and ``R15``..``R17`` as in the contract, each checked by one
method named after it (``_check_r07_rights``), plus those of ``CODES`` for the plan's
own bookkeeping (section 6).

The rules about placements (R1-R4, R7's rights, start_after_s) are first evaluated on
numpy arrays of every placement at once (``_Layout``); each rule's loop then looks
only at the jobs those arrays flag and words their violations, the same as a loop
over every job would (tests/test_verify_sift.py compares the two).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import chain
from operator import attrgetter

import numpy as np

from models import rules
from models.plan import REASONS, Deferred, Eviction, Objective, Placement, Plan
from models.policy import Thrash
from models.snapshot import Job, Node, RecentEviction, Snapshot, Storage, age_s

__all__ = ["CODES", "Violation", "is_valid", "objective_of", "verify"]

CODES: dict[str, str] = {
    "PLAN": "structure: now, status, every pending job exactly once, evictions only of "
            "running jobs and each once, valid deferral reasons",
    "EVICTION": "an eviction's tier, signal, flush_s, cost_gpu_s, preemptors or "
                "requeue_hold_until differs from the recomputed value",
    "START": "a placement's start_after_s is not the largest grace of the victims it uses",
    "STORM": "storm is not one entry per storage target with F_s > 0, with its totals",
    "WARNINGS": "a running job on a down node is not named in warnings",
    "DOWN": "a running job with a GPU on a down node is evicted",
    "OBJECTIVE": "the objective differs from the one recomputed from the plan",
}

STATUSES = ("optimal", "feasible", "fallback")
REL_TOL = 1e-6  # recomputed numbers (flush, cost, storm, objective)
BOUND_TOL = 1e-9  # float slack on inclusive bounds (R11-R13)

GPU = tuple[str, int]


@dataclass(frozen=True)
class Violation:
    """One broken rule; ``job`` is the job it is about (None for plan-wide ones)."""

    rule: str
    job: str | None
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


def verify(snapshot: Snapshot, plan: Plan) -> list[Violation]:
    """Every violation of the plan against the snapshot (empty when the plan is valid),
    in a deterministic order: the plan's structure, then rule by rule (R1-R13,
    R15-R17), then the plan's bookkeeping, each in plan order."""
    return _Checker(snapshot, plan).run()


def is_valid(snapshot: Snapshot, plan: Plan) -> bool:
    return not verify(snapshot, plan)


def objective_of(snapshot: Snapshot, plan: Plan) -> Objective:
    """The plan's objective recomputed from the snapshot (section 5, items 1-5); compare
    plans with ``objective_of(s, a).key() > objective_of(s, b).key()``."""
    return _objective(snapshot, *_entries(snapshot, plan))


def _objective(snapshot: Snapshot, placed: dict[str, Placement],
               victims: dict[str, Eviction], running: int | None = None) -> Objective:
    """objective_of for the plan's entries (``running``: R15's count of running jobs,
    when the caller has it)."""
    jobs = snapshot.job_map()
    nodes = snapshot.node_map()
    admitted = {str(t): 0 for t in sorted(snapshot.policy.tiers)}
    for jid in placed:
        job = jobs[jid]
        admitted[str(job.tier)] = admitted.get(str(job.tier), 0) + job.total_gpus
    priority = rules.priority_value(jobs[jid] for jid in placed)
    storages = snapshot.storage_map()
    cost = sum(_cost(snapshot, nodes, storages, jobs[v]) for v in victims)
    th = snapshot.policy.thrash
    return Objective(admitted_gpus=admitted, priority_value=priority,
                     eviction_cost_gpu_s=float(cost), evictions=len(victims),
                     evictions_past_budget=_past_budget(snapshot, len(victims), running)
                     ).with_past_cost(th.past_budget_gpu_s if th is not None else 0.0)


def _past_budget(snap: Snapshot, victims: int, running: int | None = None) -> int:
    """Victims past what R15's window has left (``thrash.past_budget_gpu_s``; 0 when
    it is 0 or there is no budget)."""
    th = snap.policy.thrash
    if th is None or not th.past_budget_gpu_s or not victims:
        return 0
    running, counted = _r15_window(snap, th, running)
    return max(0, victims - max(0, th.limit(running) - len(counted)))


def _r15_window(snap: Snapshot, th: Thrash, running: int | None = None
                ) -> tuple[int, list[RecentEviction]]:
    """R15's running jobs (those on down nodes are ignored; counted here unless the
    caller gives their number) and the recent evictions its window counts
    (``now - window_s <= at < now``)."""
    if running is None:
        down = {n.id for n in snap.nodes if n.state == "down"}
        jobs = snap.running()
        running = len(jobs) if not down else sum(
            1 for j in jobs if not any(p.node in down for p in j.placement or []))
    start = snap.now - timedelta(seconds=th.window_s)
    return running, [e for e in snap.recent_evictions if start <= e.at < snap.now]


# ---------------------------------------------------------------- helpers


def _entries(snap: Snapshot, plan: Plan) -> tuple[dict[str, Placement], dict[str, Eviction]]:
    """First placement of each pending job and first eviction of each running job
    (unknown jobs, wrong states and repeats are PLAN violations, reported elsewhere)."""
    jobs = snap.job_map()
    placed: dict[str, Placement] = {}
    for p in plan.placements:
        job = jobs.get(p.job)
        if job is not None and job.state == "pending" and p.job not in placed:
            placed[p.job] = p
    victims: dict[str, Eviction] = {}
    for e in plan.evictions:
        job = jobs.get(e.job)
        if job is not None and job.state == "running" and e.job not in victims:
            victims[e.job] = e
    return placed, victims


def _storage(nodes: dict[str, Node], storages: dict[str, Storage], job: Job) -> Storage | None:
    """A running job's storage target: that of its first node (section 7). The same
    as ``rules.victim_storage`` without rebuilding the node map per call."""
    node = nodes[job.placement[0].node] if job.placement else None
    if node is None:
        return None
    if node.storage is not None:
        return storages.get(node.storage)
    return next(iter(storages.values())) if len(storages) == 1 else None


def _cost(snap: Snapshot, nodes: dict[str, Node], storages: dict[str, Storage],
          job: Job) -> float:
    """Objective item 4: ``gpus * (lost + restore + solo_flush)`` in GPU-seconds."""
    solo = rules.flush_s(job, _storage(nodes, storages, job), job.checkpoint.size_gb,
                         rules.local_flush_s(nodes, job))
    return job.total_gpus * (rules.lost_s(snap.now, job) + job.checkpoint.restore_s + solo)


def _close(a: float, b: float, rel: float = REL_TOL) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def _le(a: float, b: float) -> bool:
    """``a <= b`` for an inclusive contract bound, with float slack."""
    return a <= b + BOUND_TOL * max(1.0, abs(a), abs(b))


def _num(x: float) -> str:
    """A number for messages: ``60``, ``13.125``, ``0.333333``."""
    return f"{x:.6f}".rstrip("0").rstrip(".")


def _iso(dt: object) -> str:
    if isinstance(dt, datetime):
        return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return str(dt)


def _nvlink_connected(node: Node, gpus: list[int]) -> bool:
    """R3: whether ``gpus`` induce a connected subgraph of the node's NVLink graph.

    Re-derived from the raw ``nvlink`` value rather than taken from
    ``planner.core.topology``, so that the verifier stays independent of the planner.
    """
    members = set(gpus)
    if len(members) <= 1:
        return True
    raw = node.nvlink_raw()
    if raw == "nvswitch":
        return True
    if raw == "none":
        return False
    if isinstance(raw, list):  # islands: cliques
        return any(members <= set(island) for island in raw)
    adj: dict[int, set[int]] = defaultdict(set)
    for a, b in raw["edges"]:
        adj[a].add(b)
        adj[b].add(a)
    start = min(members)
    seen = {start}
    stack = [start]
    while stack:
        g = stack.pop()
        for h in adj[g] & members:
            if h not in seen:
                seen.add(h)
                stack.append(h)
    return seen == members


_WORD = re.compile(r"[\w.-]+")


def _mentions(text: str, job_id: str) -> bool:
    """Whether ``text`` names ``job_id`` as a whole word (``job-1`` is not in ``job-10``)."""
    return re.search(rf"(?<![\w.-]){re.escape(job_id)}(?![\w.-])", text) is not None


def _mentioned(texts: list[str], job_ids: list[str]) -> set[str]:
    """The ids among ``job_ids`` that some text names as a whole word, as ``_mentions``
    decides, but reading each text once: an id made only of word characters, dots and
    dashes is named exactly when it is one of a text's maximal runs of them."""
    words = {w for t in texts for w in _WORD.findall(t)}
    return {j for j in job_ids
            if (j in words if _WORD.fullmatch(j) else any(_mentions(t, j) for t in texts))}


# ---------------------------------------------------------------- the plan as arrays


class _Layout:
    """The plan's placements as numpy arrays, and who holds the GPUs they use.

    One row per part of a placement and one per GPU it names; a GPU of the nodes the
    placements use has one number (the node's offset plus its index), so the GPUs a
    job uses, those shared by two jobs and those held by a running job (``owner``:
    filled in one pass over the running jobs, on those nodes only) are array
    operations. ``sift`` names, per rule, the placed jobs whose rows may break it: the
    rule's own loop (``_Checker``) then looks at those jobs only and words the
    violations, so the messages and their order are those of a loop over every job."""

    def __init__(self, snap: Snapshot, placed: dict[str, Placement],
                 victims: dict[str, Eviction], running: list[Job], down: set[str]):
        nodes = snap.node_map()
        self.ids = ids = list(placed)
        parts = [(i, part) for i, p in enumerate(placed.values()) for part in p.placement]
        names = list(dict.fromkeys(part.node for _i, part in parts))
        self.index = index = {n: k for k, n in enumerate(names)}
        self.nodes = known = [nodes.get(n) for n in names]
        sizes = [nd.gpus if nd is not None else 0 for nd in known]
        starts = [0] * len(sizes)
        total = 0
        for k, size in enumerate(sizes):
            starts[k] = total
            total += size
        self.sizes, self.starts, self.total = sizes, starts, total
        # the running jobs: who holds each GPU of those nodes (``holders[owner[gpu]]``),
        # and those with a GPU on a down node (R15's count, the DOWN and WARNINGS checks)
        owner = [-1] * total
        self.holders: list[str] = []
        holders = self.holders
        on_down = []
        for j in running:
            off = False
            k = -1
            for part in j.placement or ():
                node = part.node
                if node in down:
                    off = True
                u = index.get(node)
                if u is not None:
                    if k < 0:
                        k = len(holders)
                        holders.append(j.id)
                    base, size = starts[u], sizes[u]
                    for g in part.gpus:
                        if 0 <= g < size:
                            owner[base + g] = k
            if off:
                on_down.append(j.id)
        self.on_down = on_down
        self.owner = np.array(owner, dtype=np.int64)
        evicted = np.fromiter((h in victims for h in holders), bool, len(holders))
        # the rows: a part's job and node, a GPU's part and number
        n_parts = len(parts)
        self.part_job = np.fromiter((i for i, _p in parts), np.int64, n_parts)
        self.part_node = np.fromiter((index[part.node] for _i, part in parts), np.int64, n_parts)
        self.lens = np.fromiter((len(part.gpus) for _i, part in parts), np.int64, n_parts)
        count = int(self.lens.sum())
        try:
            self.gpu = np.fromiter(chain.from_iterable(part.gpus for _i, part in parts),
                                   np.int64, count)
        except OverflowError:  # (a GPU index past int64: out of every node's range)
            self.gpu = np.array([max(-1, min(g, total)) for _i, part in parts
                                 for g in part.gpus], dtype=np.int64)
        self.gpu_part = np.repeat(np.arange(n_parts, dtype=np.int64), self.lens)
        sizes_a = np.array(sizes, dtype=np.int64)
        gpu_node = self.part_node[self.gpu_part]
        self.in_range = (self.gpu >= 0) & (self.gpu < sizes_a[gpu_node])
        gid = np.array(starts, dtype=np.int64)[gpu_node] + self.gpu
        # each (job, GPU) once, by job then GPU: a GPU's users come in placement order
        pair = np.unique(self.part_job[self.gpu_part][self.in_range] * max(total, 1)
                         + gid[self.in_range])
        self.pair_job, self.pair_gpu = pair // max(total, 1), pair % max(total, 1)
        self.pair_holder = self.owner[self.pair_gpu] if total else self.pair_gpu
        held = self.pair_holder >= 0
        self.pair_evicted = held.copy()
        self.pair_evicted[held] = evicted[self.pair_holder[held]]
        self.pair_kept = held & ~self.pair_evicted  # GPUs of running jobs the plan keeps
        # placed jobs that use GPUs held by victims (not only free ones): R10, R16
        self.take_freed = {ids[i] for i in np.unique(self.pair_job[self.pair_evicted])}
        self._users: dict[int, list[str]] | None = None

    def holder(self, node: str, g: int) -> str | None:
        """The running job holding GPU ``g`` of ``node`` (a node some placement uses)."""
        u = self.index.get(node)
        if u is None or not 0 <= g < self.sizes[u]:
            return None
        k = int(self.owner[self.starts[u] + g])
        return self.holders[k] if k >= 0 else None

    def gpu_of(self, gid: int) -> GPU:
        u = bisect_right(self.starts, gid) - 1  # (a node of no GPU starts where the next does)
        return self.nodes[u].id, gid - self.starts[u]  # type: ignore[union-attr]

    def shared(self) -> list[tuple[GPU, list[str]]]:
        """The GPUs given to more than one placed job, with their users in plan order."""
        order = np.argsort(self.pair_gpu, kind="stable")  # (by GPU, then plan order)
        gpus, jobs = self.pair_gpu[order].tolist(), self.pair_job[order].tolist()
        out = []
        k = 0
        while k < len(gpus):
            end = k + 1
            while end < len(gpus) and gpus[end] == gpus[k]:
                end += 1
            if end - k > 1:
                out.append((self.gpu_of(gpus[k]), [self.ids[i] for i in jobs[k:end]]))
            k = end
        return sorted(out)

    def users_of(self, gpus: set[GPU]) -> set[str]:
        """The placed jobs using any of ``gpus`` (GPUs of running jobs)."""
        if self._users is None:  # GPU -> its users, for the GPUs running jobs hold
            self._users = {}
            held = self.pair_holder >= 0
            for i, gid in zip(self.pair_job[held].tolist(), self.pair_gpu[held].tolist(),
                              strict=True):
                self._users.setdefault(gid, []).append(self.ids[i])
        users = self._users
        return {u for n, g in gpus if (k := self.index.get(n)) is not None
                and 0 <= g < self.sizes[k] for u in users.get(self.starts[k] + g, ())}

    def sift(self, snap: Snapshot, placed: dict[str, Placement],
             victims: dict[str, Eviction]) -> dict[str, set[str]]:
        """Per rule (R1, R2, R3, R4, R7 and START), the placed jobs some row of which
        may break it: every job that does, and maybe a few more (START's numbers are
        compared at half the tolerance)."""
        jobs, pol, ids = snap.job_map(), snap.policy, self.ids
        placed_jobs = [jobs[jid] for jid in ids]
        part_job, part_node, nodes = self.part_job, self.part_node, self.nodes

        def named(rows: np.ndarray) -> set[str]:
            return {ids[i] for i in np.unique(rows)}

        # R1: unknown or not up nodes, another gpu_type, GPUs out of range or kept
        up = np.array([nd is not None and nd.state == "up" for nd in nodes], dtype=bool)
        codes: dict[str, int] = {}
        node_type = np.array([-2 if nd is None or nd.gpu_type is None
                              else codes.setdefault(nd.gpu_type, len(codes)) for nd in nodes],
                             dtype=np.int64)
        job_type = np.array([-1 if j.gpu_type is None else codes.setdefault(j.gpu_type, len(codes))
                             for j in placed_jobs], dtype=np.int64)[part_job]
        bad = ~up[part_node] | ((job_type >= 0) & (job_type != node_type[part_node]))
        out = {"R1": named(np.concatenate((part_job[bad],
                                           part_job[self.gpu_part[~self.in_range]],
                                           self.pair_job[self.pair_kept])))}
        # R2: parts against the job's nodes and gpus_per_node, a node or GPU twice
        size = np.fromiter((j.nodes for j in placed_jobs), np.int64, len(ids))
        per_node = np.fromiter((j.gpus_per_node for j in placed_jobs), np.int64, len(ids))
        wrong = np.flatnonzero(np.bincount(part_job, minlength=len(ids)) != size)
        twice_node = np.unique(part_job * max(len(nodes), 1) + part_node, return_counts=True)
        order = np.lexsort((self.gpu, self.gpu_part))
        g, gp = self.gpu[order], self.gpu_part[order]
        twice_gpu = gp[1:][(gp[1:] == gp[:-1]) & (g[1:] == g[:-1])]
        out["R2"] = named(np.concatenate((
            wrong, twice_node[0][twice_node[1] > 1] // max(len(nodes), 1),
            part_job[self.lens != per_node[part_job]], part_job[twice_gpu])))
        # R3: NVLink jobs with two GPUs or more on a node that is not one NVSwitch; jobs
        # bound to one block or NVLink domain
        switch = np.array([nd is not None and nd.nvlink == "nvswitch" for nd in nodes],
                          dtype=bool)
        nvlink = np.fromiter((j.topology == "nvlink" for j in placed_jobs), bool, len(ids))
        many = np.bincount(self.gpu_part[self.in_range], minlength=len(part_job)) > 1
        bound = [jid for jid, j in zip(ids, placed_jobs, strict=True)
                 if j.same_block or j.same_nvlink_domain]
        out["R3"] = named(part_job[nvlink[part_job] & many & ~switch[part_node]]) | set(bound)
        # R4: pools that do not admit the job's tier
        out["R4"] = set()
        if pol.pools:
            admits: dict[tuple[str, int], bool] = {}
            for i, u in zip(part_job.tolist(), part_node.tolist(), strict=True):
                nd, tier = nodes[u], placed_jobs[i].tier
                if nd is not None and not admits.setdefault(
                        (nd.pool, tier), pol.pool_admits(nd.pool, tier)):
                    out["R4"].add(ids[i])
        # R7: jobs on GPUs of victims (their tiers are compared by the rule's loop)
        out["R7"] = self.take_freed
        # START: start_after_s against the largest grace of the victims whose GPUs it uses
        grace = np.array([victims[h].grace_s if h in victims else 0.0 for h in self.holders],
                         dtype=float)
        want = np.full(len(ids), -np.inf)
        np.maximum.at(want, self.pair_job[self.pair_evicted],
                      grace[self.pair_holder[self.pair_evicted]])
        want[np.isneginf(want)] = 0.0
        got = np.fromiter((p.start_after_s for p in placed.values()), float, len(ids))
        scale = np.maximum(1.0, np.maximum(np.abs(got), np.abs(want)))
        off = ~(np.abs(got - want) <= REL_TOL / 2 * scale)  # (NaN included)
        out["START"] = named(np.flatnonzero(off))
        return out


# ---------------------------------------------------------------- the checker


class _Checker:
    """One verification run: the plan's structure, then one ``_check_rNN_*`` method per
    rule of the contract (R1-R13, R15-R17, in that order), then the plan's own
    bookkeeping (section 6). Violations come rule by rule, each in plan order."""

    def __init__(self, snap: Snapshot, plan: Plan, *, sift: bool = True):
        self.snap = snap
        self.plan = plan
        self.now = snap.now
        self.pol = snap.policy
        self.nodes = snap.node_map()
        self.jobs = snap.job_map()
        self.storages = snap.storage_map()
        self.out: list[Violation] = []
        self.placed, self.victims = _entries(snap, plan)
        self._uses: dict[str, set[GPU]] = {}  # placed job -> GPUs it uses (in range)
        self._users_by_victim: dict[str, list[str]] = {}  # running job -> _users_of
        running = snap.running()
        self.lay = _Layout(snap, self.placed, self.victims, running,
                           {n.id for n in snap.nodes if n.state == "down"})
        # per rule, the placed jobs its loop looks at (all of them without sifting)
        self.suspects = self.lay.sift(snap, self.placed, self.victims) if sift else None
        self.on_down = sorted(self.lay.on_down)
        self.down_set = set(self.on_down)
        self.r15_running = len(running) - len(self.on_down)  # R15: not on down nodes
        self.take_freed = self.lay.take_freed
        self.loads, self.flushes = self._flushes()

    def add(self, rule: str, job: str | None, message: str) -> None:
        self.out.append(Violation(rule, job, message))

    def run(self) -> list[Violation]:
        self._check_structure()
        self._check_r01_capacity()
        self._check_r02_gang()
        self._check_r03_topology()
        self._check_r04_pools()
        self._check_r05_preemptible()
        self._check_r06_immunity()
        self._check_r07_rights()
        self._check_r08_windows()
        self._check_r09_backoff()
        self._check_r10_cascade_guard()
        self._check_r11_storm()
        self._check_r12_grace()
        self._check_r13_budgets()
        self._check_r15_thrash_budget()
        self._check_r16_patience()
        self._check_r17_ending_soon()
        self._check_down()
        self._check_evictions()
        self._check_storm_entries()
        self._check_start_after()
        self._check_warnings()
        self._check_objective()
        return self.out

    # ---- what the plan uses

    def _placed(self, rule: str) -> Iterator[tuple[str, Placement]]:
        """The placed jobs the loop of ``rule`` looks at, in plan order: those the
        layout's sift kept (every one that may break it), or all."""
        keep = None if self.suspects is None else self.suspects[rule]
        for jid, p in self.placed.items():
            if keep is None or jid in keep:
                yield jid, p

    def _used(self, jid: str) -> list[GPU]:
        """The GPUs placed job ``jid`` uses (on known nodes, in range), in order."""
        used = self._uses.get(jid)
        if used is None:
            used = self._uses[jid] = set()
            for part in self.placed[jid].placement:
                node = self.nodes.get(part.node)
                if node is not None:
                    used.update((part.node, g) for g in part.gpus if 0 <= g < node.gpus)
        return sorted(used)

    def _flushes(self) -> tuple[dict[str, float], dict[str, tuple[Storage | None, float, float]]]:
        """R11/R12's numbers: the load F_s per storage target, and each victim's storage
        target, flush_s and need under those loads."""
        load: dict[str, float] = defaultdict(float)
        for vid in self.victims:
            v = self.jobs[vid]
            s = _storage(self.nodes, self.storages, v)
            if rules.flushes(v) and s is not None:
                load[s.id] += v.checkpoint.size_gb
        out = {}
        for vid in self.victims:
            v = self.jobs[vid]
            s = _storage(self.nodes, self.storages, v)
            flush = rules.flush_s(v, s, load[s.id] if s is not None else 0.0,
                                  rules.local_flush_s(self.nodes, v))
            out[vid] = (s, flush, rules.need_s(self.pol, v, flush))
        return load, out

    # ---- section 6: structure

    def _check_structure(self) -> None:
        plan = self.plan
        if plan.now != self.now:
            self.add("PLAN", None, f"plan.now {_iso(plan.now)} differs from the snapshot's now "
                                   f"{_iso(self.now)}")
        if plan.status not in STATUSES:
            self.add("PLAN", None, f"status {plan.status!r} is not one of {', '.join(STATUSES)}")
        if self._well_formed():
            return
        seen: set[str] = set()
        for i, e in enumerate(plan.evictions):
            job = self.jobs.get(e.job)
            if job is None:
                self.add("PLAN", e.job, f"evictions[{i}]: unknown job {e.job!r}")
            elif job.state != "running":
                self.add("PLAN", e.job, f"evictions[{i}]: job {e.job!r} is pending; only running "
                                        "jobs can be evicted")
            elif e.job in seen:
                self.add("PLAN", e.job, f"evictions[{i}]: job {e.job!r} is evicted twice")
            seen.add(e.job)
        listed: dict[str, str] = {}
        running_msg = {"placements": "is already running; only pending jobs are placed",
                       "deferred": "is running; only pending jobs are deferred"}
        kinds: tuple[tuple[str, Sequence[Placement | Deferred]], ...] = (
            ("placements", plan.placements), ("deferred", plan.deferred))
        for kind, entries in kinds:
            for i, entry in enumerate(entries):
                where = f"{kind}[{i}]"
                job = self.jobs.get(entry.job)
                if job is None:
                    self.add("PLAN", entry.job, f"{where}: unknown job {entry.job!r}")
                elif job.state != "pending":
                    self.add("PLAN", entry.job, f"{where}: job {entry.job!r} {running_msg[kind]}")
                elif entry.job in listed:
                    self.add("PLAN", entry.job, f"{where}: job {entry.job!r} is listed twice "
                                                f"(also {listed[entry.job]})")
                listed.setdefault(entry.job, where)
        for i, d in enumerate(plan.deferred):
            where = f"deferred[{i}]"
            if d.reason not in REASONS:
                self.add("PLAN", d.job, f"{where}: reason {d.reason!r} is not one of "
                                        f"{', '.join(REASONS)}")
        for j in self.snap.pending():
            if j.id not in listed:
                self.add("PLAN", j.id, f"pending job {j.id!r} is neither placed nor deferred")

    def _well_formed(self) -> bool:
        """Whether the entries are as section 6 asks (the loops of _check_structure then
        find nothing): every eviction of a distinct running job, every placement of a
        distinct pending job, deferrals of distinct pending jobs not placed, with valid
        reasons, and every pending job listed."""
        plan, pending = self.plan, self.snap.pending()
        deferred = set(map(attrgetter("job"), plan.deferred))  # (100,000 of them: C loops)
        return (len(self.victims) == len(plan.evictions)
                and len(self.placed) == len(plan.placements)
                and len(deferred) == len(plan.deferred) and deferred.isdisjoint(self.placed)
                and len(self.placed) + len(deferred) == len(pending)
                and deferred <= set(map(attrgetter("id"), pending))
                and set(map(attrgetter("reason"), plan.deferred)) <= set(REASONS))

    # ---- R1-R17

    def _check_r01_capacity(self) -> None:
        """R1: new placements only on known, up nodes of the job's gpu_type, on GPUs the
        node has, not held by a running job the plan does not evict, and no GPU
        given to two jobs."""
        for jid, p in self._placed("R1"):
            job = self.jobs[jid]
            for part in p.placement:
                n = part.node
                node = self.nodes.get(n)
                if node is None:
                    self.add("R1", jid, f"job {jid!r} is placed on unknown node {n!r}")
                    continue
                if node.state != "up":
                    self.add("R1", jid, f"job {jid!r} is placed on {n}, which is {node.state}; "
                                        "new placements go only to up nodes")
                if job.gpu_type is not None and node.gpu_type != job.gpu_type:
                    self.add("R1", jid, f"job {jid!r} needs gpu_type {job.gpu_type} but {n} has "
                                        f"{node.gpu_type or 'no gpu_type'}")
                for g in part.gpus:
                    if not 0 <= g < node.gpus:
                        self.add("R1", jid, f"job {jid!r} uses GPU {g} of {n}, which has only "
                                            f"{node.gpus} GPUs (0..{node.gpus - 1})")
            reported: set[str] = set()
            for n, g in self._used(jid):
                holder = self.lay.holder(n, g)
                if holder is None or holder in reported or holder in self.victims:
                    continue
                reported.add(holder)
                self.add("R1", jid, f"job {jid!r} uses GPU {g} of {n}, still held by running job "
                                    f"{holder!r}, which the plan does not evict")
        for (n, g), users in self.lay.shared():
            names = " and ".join(repr(u) for u in users)
            self.add("R1", users[1], f"GPU {g} of {n} is given to both {names}")

    def _check_r02_gang(self) -> None:
        """R2: a job is placed whole: ``nodes`` distinct nodes, ``gpus_per_node``
        distinct GPUs on each."""
        for jid, p in self._placed("R2"):
            job = self.jobs[jid]
            parts = p.placement
            if len(parts) != job.nodes:
                self.add("R2", jid, f"job {jid!r} needs {job.nodes} node(s) but is placed on "
                                    f"{len(parts)}")
            node_ids = [part.node for part in parts]
            if len(set(node_ids)) != len(node_ids):
                self.add("R2", jid, f"job {jid!r} is placed twice on one node "
                                    f"({', '.join(node_ids)}); its nodes must be distinct")
            for part in parts:
                if len(part.gpus) != job.gpus_per_node or len(set(part.gpus)) != len(part.gpus):
                    self.add("R2", jid, f"job {jid!r} gets GPUs {part.gpus} on {part.node}; it "
                                        f"needs exactly {job.gpus_per_node} distinct GPUs per node")

    def _check_r03_topology(self) -> None:
        """R3: an NVLink job's GPUs on each node are connected; ``same_block`` and
        ``same_nvlink_domain`` jobs share one non-null block or domain."""
        for jid, p in self._placed("R3"):
            job = self.jobs[jid]
            known_nodes: list[Node] = []
            for part in p.placement:
                node = self.nodes.get(part.node)
                if node is None:
                    continue
                known_nodes.append(node)
                in_range = [g for g in part.gpus if 0 <= g < node.gpus]
                if (job.topology == "nvlink" and len(set(in_range)) > 1
                        and not _nvlink_connected(node, in_range)):
                    self.add("R3", jid, f"job {jid!r} needs NVLink but GPUs {sorted(in_range)} of "
                                        f"{part.node} are not connected (nvlink "
                                        f"{node.nvlink_raw()!r})")
            for flag, attr in (("same_block", "block"), ("same_nvlink_domain", "nvlink_domain")):
                if getattr(job, flag) and known_nodes:
                    values = {getattr(node, attr) for node in known_nodes}
                    if None in values or len(values) > 1:
                        shown = ", ".join(f"{node.id}={getattr(node, attr)}"
                                          for node in known_nodes)
                        self.add("R3", jid, f"job {jid!r} has {flag} but its nodes do not share "
                                            f"one non-null {attr} ({shown})")

    def _check_r04_pools(self) -> None:
        """R4: a job goes only to nodes whose pool admits its tier."""
        for jid, p in self._placed("R4"):
            job = self.jobs[jid]
            for part in p.placement:
                node = self.nodes.get(part.node)
                if node is not None and not self.pol.pool_admits(node.pool, job.tier):
                    self.add("R4", jid, f"job {jid!r} (tier {job.tier}) is placed on {part.node} "
                                        f"in pool {node.pool!r}, which admits tiers "
                                        f"{self.pol.pools.get(node.pool)}")

    def _check_r05_preemptible(self) -> None:
        """R5: only jobs of preemptible tiers are evicted."""
        for vid in self.victims:
            v = self.jobs[vid]
            if not self.pol.tier(v.tier).preemptible:
                self.add("R5", vid, f"job {vid!r} is evicted but tier {v.tier} is not "
                                    "preemptible")

    def _check_r06_immunity(self) -> None:
        """R6: no victim has run less than its tier's ``min_runtime_s``."""
        for vid in self.victims:
            v = self.jobs[vid]
            tier = self.pol.tier(v.tier)
            age = age_s(self.now, v.started_at)
            if age < tier.min_runtime_s:
                self.add("R6", vid, f"job {vid!r} is evicted after running {_num(age)} s, inside "
                                    f"its tier-{v.tier} immunity of {_num(tier.min_runtime_s)} s")

    def _check_r07_rights(self) -> None:
        """R7: a placed job uses only GPUs of victims whose tier its own tier may
        preempt, and every victim gives a GPU to such a job (no eviction without a
        beneficiary)."""
        for jid, _p in self._placed("R7"):
            job = self.jobs[jid]
            reported: set[str] = set()
            for n, g in self._used(jid):
                holder = self.lay.holder(n, g)
                if holder is None or holder in reported or holder not in self.victims:
                    continue
                victim = self.jobs[holder]
                if not self.pol.can_preempt(job.tier, victim.tier):
                    reported.add(holder)
                    self.add("R7", jid, f"job {jid!r} uses GPU {g} of {n} held by "
                                        f"tier-{victim.tier} job {holder!r}, which tier "
                                        f"{job.tier} may not preempt")
        for vid in self.victims:
            v = self.jobs[vid]
            users = self._users_of(v)
            if not any(self.pol.can_preempt(self.jobs[u].tier, v.tier) for u in users):
                why = (f"only by {', '.join(repr(u) for u in users)}, whose tier may not "
                       f"preempt tier {v.tier}") if users else "by no placed job"
                self.add("R7", vid, f"job {vid!r} is evicted but its GPUs are used {why} "
                                    "(no eviction without a beneficiary)")

    def _check_r08_windows(self) -> None:
        """R8: a job of a tier with windows is evicted only inside one of them."""
        for vid in self.victims:
            v = self.jobs[vid]
            tier = self.pol.tier(v.tier)
            if tier.windows and not any(w.contains(self.now) for w in tier.windows):
                self.add("R8", vid, f"job {vid!r} is evicted at {_iso(self.now)}, outside every "
                                    f"preemption window of tier {v.tier}")

    def _check_r09_backoff(self) -> None:
        """R9: a job preempted before starts only after its cooldown."""
        for jid in self.placed:
            job = self.jobs[jid]
            until = rules.cooldown_until(self.pol, job)
            if until is not None and self.now < until:
                self.add("R9", jid, f"job {jid!r} was preempted {job.preemptions} time(s), last "
                                    f"at {_iso(job.last_preempted_at)}; it may not start before "
                                    f"{_iso(until)}")

    def _check_r10_cascade_guard(self) -> None:
        """R10: a job preempted within ``cascade_guard_s`` uses only GPUs free in the
        snapshot."""
        for jid in self.placed:
            job = self.jobs[jid]
            if jid in self.take_freed and rules.cascade_guarded(self.pol, self.now, job):
                self.add("R10", jid, f"job {jid!r} was preempted at "
                                     f"{_iso(job.last_preempted_at)}, within cascade_guard_s="
                                     f"{_num(self.pol.cascade_guard_s)}; it may use only GPUs free "
                                     "in the snapshot, not freed by evictions")

    def _check_r11_storm(self) -> None:
        """R11: every flushing victim's need fits within ``grace.max_s`` under the load
        of this tick's flushes on its storage target."""
        max_s = self.pol.grace.max_s
        for vid in self.victims:
            v = self.jobs[vid]
            s, flush, need = self.flushes[vid]
            if rules.flushes(v) and not _le(need, max_s):
                where = (f"storage {s.id} carrying {_num(self.loads[s.id])} GB" if s
                         else "local disks")
                self.add("R11", vid, f"job {vid!r} needs {_num(need)} s of grace to flush its "
                                     f"checkpoint ({where}, flush {_num(flush)} s), over "
                                     f"max_s={_num(max_s)} s; it cannot be evicted this tick")

    def _check_r12_grace(self) -> None:
        """R12: a flushing victim gets ``need <= grace_s <= max_s`` (those whose need is
        over ``max_s`` break R11); one without a signal exactly ``min_s``."""
        grace = self.pol.grace
        for vid, e in self.victims.items():
            v = self.jobs[vid]
            _s, flush, need = self.flushes[vid]
            if not rules.flushes(v):
                if not _close(e.grace_s, grace.min_s, BOUND_TOL):
                    self.add("R12", vid, f"job {vid!r} has no checkpoint signal; its grace must "
                                         f"be exactly min_s={_num(grace.min_s)} s, not "
                                         f"{_num(e.grace_s)} s")
            elif _le(need, grace.max_s) and not (_le(need, e.grace_s)
                                                 and _le(e.grace_s, grace.max_s)):
                self.add("R12", vid, f"job {vid!r} gets grace {_num(e.grace_s)} s; it needs "
                                     f"{_num(need)} <= grace <= {_num(grace.max_s)} s "
                                     f"(flush {_num(flush)} s)")

    def _check_r13_budgets(self) -> None:
        """R13: at most ``max_evictions_per_tick`` victims, whose GPUs are at most
        ``max_evicted_gpu_fraction`` of those on up and drain nodes."""
        cap = self.pol.max_evictions_per_tick
        if cap is not None and len(self.victims) > cap:
            self.add("R13", None, f"{len(self.victims)} evictions exceed "
                                  f"max_evictions_per_tick={cap}")
        frac = self.pol.max_evicted_gpu_fraction
        if frac is not None:
            live = {n.id for n in self.snap.nodes if n.state in ("up", "drain")}
            total = sum(self.nodes[n].gpus for n in live)
            freed = sum(len(part.gpus) for vid in self.victims
                        for part in self.jobs[vid].placement or [] if part.node in live)
            if not _le(freed, frac * total):
                self.add("R13", None, f"evictions free {freed} of {total} GPUs on up/drain nodes, "
                                      f"over max_evicted_gpu_fraction={_num(frac)} "
                                      f"({_num(frac * total)} GPUs)")

    def _check_r15_thrash_budget(self) -> None:
        """R15: at most max(0, B - H - E) victims that are not exempt (and, with
        ``thrash.max_gpu_fraction``, the same bound on their GPUs)."""
        th = self.pol.thrash
        if th is None or not self.victims:
            return
        running, counted = _r15_window(self.snap, th, self.r15_running)
        limit, recent = th.limit(running), len(counted)
        exempt = [vid for vid in self.victims
                  if th.exempt_by(self.jobs[u].tier for u in self._users_of(self.jobs[vid]))]
        others = len(self.victims) - len(exempt)
        allowed = max(0, limit - recent - len(exempt))
        live_gpus = sum(n.gpus for n in self.snap.nodes if n.state in ("up", "drain"))
        gpu_limit = th.gpu_limit(live_gpus)
        if gpu_limit is not None:
            recent_gpus = sum(e.gpus or 0 for e in counted)
            gpus = {vid: self.jobs[vid].total_gpus for vid in self.victims}
            exempt_gpus = sum(gpus[v] for v in exempt)
            other_gpus = sum(gpus.values()) - exempt_gpus
            gpus_allowed = max(0, gpu_limit - recent_gpus - exempt_gpus)
            if other_gpus > gpus_allowed:
                self.add("R15", None, f"evictions not exempt free {other_gpus} GPUs, over the "
                                      f"rolling GPU budget: {gpu_limit} "
                                      f"(max(min_gpus={th.min_gpus}, "
                                      f"floor({_num(th.max_gpu_fraction or 0)} x {live_gpus} "
                                      f"GPUs on up/drain nodes))), {recent_gpus} in the last "
                                      f"{_num(th.window_s)} s and {exempt_gpus} freed by exempt "
                                      f"victims in this plan leave {gpus_allowed}")
        if others > allowed:
            how = "any" if th.exempt_if == "any" else "every"
            self.add("R15", None, f"{others} evictions not exempt (not {how} preemptor of a "
                                  f"tier in exempt_tiers={th.exempt_tiers}) exceed the rolling "
                                  "budget: "
                                  f"B={limit} (max(min_evictions={th.min_evictions}, "
                                  f"floor({_num(th.max_fraction)} x {running} running jobs))), "
                                  f"{recent} in the last {_num(th.window_s)} s and {len(exempt)} "
                                  f"exempt in this plan leave {allowed}")

    def _check_r16_patience(self) -> None:
        """R16: a job uses GPUs freed by victims only after ``preempt_after_s`` queued."""
        for jid in self.placed:
            if jid not in self.take_freed:
                continue
            job = self.jobs[jid]
            wait = self.pol.tier(job.tier).preempt_after_s
            start = job.queue_start()
            if wait > 0 and start is not None and age_s(self.now, start) < wait:
                self.add("R16", job.id, f"job {job.id!r} has been queued since {_iso(start)}, "
                                        f"{_num(age_s(self.now, start))} s, less than tier "
                                        f"{job.tier}'s preempt_after_s={_num(wait)}; it may use "
                                        "only GPUs free in the snapshot, not freed by evictions")

    def _check_r17_ending_soon(self) -> None:
        """R17: a job expected to end within ``spare_ending_within_s`` is not evicted."""
        within = self.pol.spare_ending_within_s
        for vid in self.victims:
            v = self.jobs[vid]
            if within > 0 and v.expected_end_at is not None:
                left = (v.expected_end_at - self.now).total_seconds()
                if 0 <= left <= within:
                    self.add("R17", vid, f"job {vid!r} is evicted although it is expected to end "
                                         f"at {_iso(v.expected_end_at)}, {_num(left)} s from now, "
                                         f"within spare_ending_within_s={_num(within)}")

    # ---- section 6: the plan's bookkeeping

    def _check_down(self) -> None:
        """A running job with a GPU on a down node is never a victim."""
        for vid in self.victims:
            if vid in self.down_set:
                v = self.jobs[vid]
                down = sorted({p.node for p in v.placement or []
                               if self.nodes[p.node].state == "down"})
                self.add("DOWN", vid, f"job {vid!r} has GPUs on down node {', '.join(down)}; it "
                                      "is never a victim")

    def _check_evictions(self) -> None:
        """Each eviction's tier, signal, preemptors, cost, requeue hold and flush_s."""
        for vid, e in self.victims.items():
            v = self.jobs[vid]
            if e.tier != v.tier:
                self.add("EVICTION", vid, f"eviction of {vid!r} says tier {e.tier}, the job is "
                                          f"tier {v.tier}")
            if e.signal != v.checkpoint.signal:
                self.add("EVICTION", vid, f"eviction of {vid!r} says signal {e.signal!r}, the "
                                          f"job's checkpoint signal is {v.checkpoint.signal!r}")
            users = self._users_of(v)
            if sorted(e.preemptors) != users:
                self.add("EVICTION", vid, f"eviction of {vid!r} lists preemptors {e.preemptors}; "
                                          f"the placed jobs using its GPUs are {users}")
            cost = _cost(self.snap, self.nodes, self.storages, v)
            if not _close(e.cost_gpu_s, cost):
                self.add("EVICTION", vid, f"eviction of {vid!r} has cost_gpu_s "
                                          f"{_num(e.cost_gpu_s)}, expected {_num(cost)} "
                                          "(objective item 4)")
            hold = self.pol.backoff.cooldown(v.preemptions + 1)
            expected = self.now + timedelta(seconds=e.grace_s + hold)
            if abs((e.requeue_hold_until - expected).total_seconds()) >= 1.0:
                self.add("EVICTION", vid, f"eviction of {vid!r} has requeue_hold_until "
                                          f"{_iso(e.requeue_hold_until)}, expected "
                                          f"{_iso(expected)} (now + grace {_num(e.grace_s)} s + "
                                          f"cooldown {_num(hold)} s)")
            flush = self.flushes[vid][1]
            if not _close(e.flush_s, flush):
                self.add("EVICTION", vid, f"eviction of {vid!r} has flush_s {_num(e.flush_s)}, "
                                          f"expected {_num(flush)} (R12)")

    def _check_storm_entries(self) -> None:
        """The plan's storm: one entry per storage target with F_s > 0, with its totals."""
        expected = {sid: gb for sid, gb in self.loads.items() if gb > 0}
        seen: set[str] = set()
        for i, entry in enumerate(self.plan.storm):
            sid = entry.storage
            if sid in seen:
                self.add("STORM", None, f"storm[{i}]: storage {sid!r} is listed twice")
                continue
            seen.add(sid)
            if sid not in expected:
                self.add("STORM", None, f"storm[{i}]: storage {sid!r} receives no flush this tick "
                                        "and must not be listed")
                continue
            gb = expected[sid]
            secs = gb / self.storages[sid].write_gb_per_s
            if not _close(entry.flush_gb, gb) or not _close(entry.flush_s, secs):
                self.add("STORM", None, f"storm[{i}]: storage {sid!r} has flush_gb "
                                        f"{_num(entry.flush_gb)} and flush_s {_num(entry.flush_s)}, "
                                        f"expected {_num(gb)} GB and {_num(secs)} s")
        for sid in sorted(set(expected) - seen):
            self.add("STORM", None, f"storm: storage {sid!r} receives {_num(expected[sid])} GB of "
                                    "flushes but has no entry")

    def _check_start_after(self) -> None:
        for jid, p in self._placed("START"):
            graces = [self.victims[h].grace_s for h in
                      {self.lay.holder(n, g) for n, g in self._used(jid)} if h in self.victims]
            expected = max(graces, default=0.0)
            if not _close(p.start_after_s, expected):
                self.add("START", jid, f"job {jid!r} has start_after_s {_num(p.start_after_s)}, "
                                       f"expected {_num(expected)} (the largest grace of the "
                                       "victims whose GPUs it uses)")

    def _users_of(self, v: Job) -> list[str]:
        """The placed jobs that use a running job's GPUs (worked out once per job:
        several rules ask)."""
        hit = self._users_by_victim.get(v.id)
        if hit is None:
            gpus = {(part.node, g) for part in v.placement or [] for g in part.gpus}
            hit = self._users_by_victim[v.id] = sorted(self.lay.users_of(gpus))
        return hit

    # ---- section 6: warnings and objective

    def _check_warnings(self) -> None:
        if not self.on_down:
            return
        named = _mentioned(self.plan.warnings, self.on_down)
        for jid in self.on_down:
            if jid not in named:
                self.add("WARNINGS", jid, f"running job {jid!r} sits on a down node but is not "
                                          "named in warnings")

    def _check_objective(self) -> None:
        got = self.plan.objective
        want = _objective(self.snap, self.placed, self.victims, self.r15_running)
        if got.admitted_gpus != want.admitted_gpus:
            self.add("OBJECTIVE", None, f"objective.admitted_gpus is {got.admitted_gpus}, "
                                        f"expected {want.admitted_gpus}")
        if got.priority_value != want.priority_value:
            self.add("OBJECTIVE", None, f"objective.priority_value is {got.priority_value}, "
                                        f"expected {want.priority_value}")
        if not _close(got.eviction_cost_gpu_s, want.eviction_cost_gpu_s):
            self.add("OBJECTIVE", None, "objective.eviction_cost_gpu_s is "
                                        f"{_num(got.eviction_cost_gpu_s)}, expected "
                                        f"{_num(want.eviction_cost_gpu_s)}")
        if got.evictions != want.evictions:
            self.add("OBJECTIVE", None, f"objective.evictions is {got.evictions}, expected "
                                        f"{want.evictions}")
        # (victims past the budget mean something only for a plan that keeps R15)
        if (got.evictions_past_budget != want.evictions_past_budget
                and not any(v.rule == "R15" for v in self.out)):
            self.add("OBJECTIVE", None, "objective.evictions_past_budget is "
                                        f"{got.evictions_past_budget}, expected "
                                        f"{want.evictions_past_budget}")
