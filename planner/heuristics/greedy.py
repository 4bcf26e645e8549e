"""The greedy planner: the CP-SAT hint, the fallback, and a baseline.

Pending jobs are taken in objective order (tier, then larger jobs first, then
priority, then id). Each job goes where it fits on GPUs already available to it
(free, or freed this tick by victims its tier may preempt), best fit first;
otherwise on the node(s) where the cheapest set of allowed victims makes room,
as long as the storm limit (R11/R12) and the eviction budgets (R13) still hold.
Victims on a node are chosen by trying every single victim and a cheapest-first
augmentation, keeping the cheapest that fits. A gang takes the best nodes whose
victims stay within those limits together, not only one by one.

:func:`squeaky_wheel` runs it once more with the jobs a plan deferred placed first
within their tier.

:meth:`GreedyPlanner.cheaper_placements` uses the same search on a finished
plan: it moves single-node jobs, and gangs free to use any nodes, to cheaper
options next to the rest of the plan (one of the polishing passes of
planner/heuristics/repack.py).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import groupby
from typing import TYPE_CHECKING, Any

import numpy as np

from models.rules import gang_group, keeps_group
from planner.core import topology as topo
from planner.core.budget import Budget
from planner.core.decision import Decision, clean, exempt_victims, preemptors_of
from planner.core.problem import GpuOwners, PendingInfo, Problem


@dataclass(frozen=True)
class CutKeep:
    """What a greedy run cut short keeps of ``whole`` for its plan's assembly and
    checks, from what the plan holds so far: ``fixed`` seconds, plus ``per_placed``
    per placed job, plus ``per_victim`` per victim (``per_placed`` where not given),
    plus ``per_deferred`` per job searched and not placed (explained in full; a job
    not reached, or tried on free GPUs only, is explained in a line)."""

    whole: Budget
    fixed: float
    per_placed: float
    per_deferred: float
    per_victim: float | None = None

    def keep_s(self, placed: int, deferred: int, victims: int = 0) -> float:
        """For a plan of ``placed`` jobs, ``victims`` victims and ``deferred`` jobs
        searched and not placed (victims may be counted in ``placed`` instead where
        ``per_victim`` is not given)."""
        per_victim = self.per_placed if self.per_victim is None else self.per_victim
        return (self.fixed + self.per_placed * placed + per_victim * victims
                + self.per_deferred * deferred)


@dataclass
class GreedyState:
    """A plan being built or changed, as the greedy search sees it: which GPUs are
    still free, whose GPUs this tick's victims leave, the storm loads and the
    evictions the limits count. Changed only through :class:`GreedyPlanner`'s
    methods (:meth:`~GreedyPlanner.evict`, :meth:`~GreedyPlanner.occupy`,
    :meth:`~GreedyPlanner.take_gpus`, :meth:`~GreedyPlanner.release`), which keep
    the change counters that the planner's memos depend on; read freely."""

    free: dict[int, int]  # node idx -> free GPUs not yet used
    freed: dict[int, dict[str, int]] = field(default_factory=dict)  # node -> victim -> mask
    victims: set[str] = field(default_factory=set)
    exempt: set[str] = field(default_factory=set)  # victims evicted for exempt tiers (R15)
    loads: dict[str, float] = field(default_factory=dict)
    min_cap: dict[str, float] = field(default_factory=dict)  # storage -> tightest victim cap
    evicted_gpus: int = 0
    version: dict[int, int] = field(default_factory=dict)  # node -> change counter
    log: list[int] = field(default_factory=list)  # nodes in the order they changed
    epoch: int = 0  # changes of the victims (their loads, the evictions)


@dataclass
class ShapeHeap:
    """Best option per candidate node for one job shape, as a lazy heap: entries
    whose node changed since (version) are skipped; changed nodes are re-scored
    from the state's change log before each query."""

    heap: list = field(default_factory=list)
    pos: int = 0
    members: frozenset[int] = frozenset()
    # the bounds of the snapshot's state (version 0), sorted (_first_order): they
    # enter the heap one at a time, the next when the one in it (front) leaves it
    first: tuple[list, list, list, list] = ([], [], [], [])
    k: int = 0
    front: tuple | None = None
    # nodes scored "cannot host" because a limit refused their options: they come
    # back when the node changes (the log), or when the limits they face are looser
    # than then (after release): their _relief_storages -> their _limits then ->
    # nodes; reliefs: the planner's count of falls then (none since: nothing to check)
    dropped: dict[tuple, dict[tuple, list[int]]] = field(default_factory=dict)
    reliefs: int = 0


@dataclass
class GroupIndex:
    """The options of one gang shape that keeps a block or an NVLink domain (R2),
    by group, kept from one gang of the shape to the next in one state. A node
    enters with a lower bound on its option (:meth:`GreedyPlanner._bound`; again
    when the state's log says it changed) and is scored only when its group's
    bound makes the group a candidate; a scored option met the limits of its time,
    which may have tightened since, so it too is a lower bound until checked."""

    st: GreedyState
    pos: int  # the state's log up to here is in opts
    reliefs: int  # the planner's count of falling loads then (a change rebuilds it)
    members: frozenset[int]
    group_of: dict[int, tuple]  # candidate node -> its group key
    groups: dict[tuple, list[int]]  # group key -> candidate nodes
    # node -> (cost, victims count, leftover, node id, node idx, victims): an option,
    # or a bound (victims None); None: the node cannot host the shape
    opts: dict[int, tuple | None]
    ranked: dict[tuple, list[tuple]] = field(default_factory=dict)  # group -> options, best first
    dirty: set[tuple] = field(default_factory=set)  # groups whose ranking is out of date


def job_order(problem: Problem, order: str = "size") -> list[PendingInfo]:
    """Pending jobs (not in backoff) by tier, then larger jobs first (``"size"``, the
    objective's order) or more important jobs first (``"priority"``, the queue order
    of the Kubernetes- and Slurm-style baselines)."""
    if order == "priority":
        def key(p: PendingInfo) -> tuple:
            return (p.job.tier, -p.job.priority, -p.job.total_gpus, p.job.id)
    else:
        def key(p: PendingInfo) -> tuple:
            return (p.job.tier, -p.job.total_gpus, -p.job.priority, p.job.id)
    return sorted((p for p in problem.pending.values() if p.held_until is None), key=key)


def squeaky_wheel(problem: Problem, d: Decision, budget: Budget | None = None,
                  also: frozenset[str] = frozenset(), **settings: Any) -> Decision:
    """The greedy plan once more (with ``settings``, those of the variant that gave
    ``d``), placing the jobs ``d`` defers first within their tier (and ``also``: the
    gangs a packing of blocks chose, planner/solver/packing.py): a second pass of
    "squeaky wheel" optimisation. Largest-first can give a big job the only nodes a
    smaller, pickier job could use; the second pass places the picky job first. The
    caller keeps whichever plan is lexicographically better. It stops at the end of
    ``budget`` (GreedyPlanner.solve)."""
    deferred = frozenset(j for j in problem.pending if j not in d.placements)
    return clean(problem, GreedyPlanner(problem, first=deferred | also,
                                        **settings).solve(budget))


def cover_bounds(ws: list[tuple[float, int]]) -> tuple[float, ...]:
    """For victims (weight, GPUs they free on a node): per number of GPUs k (0 up to
    all of theirs), a lower bound on the weight of any of them that free at least k:
    the fractional cover, cheapest per GPU first. An option on a node that misses k
    GPUs evicts victims that free at least k, so its cost is at least the k-th
    (lowered by a billionth, so that rounding never puts it above the cost: a bound
    sorts before the option it bounds). Each victim's weight is spread over its
    GPUs and summed one GPU at a time: the numpy tables of the search
    (GreedyPlanner._cover_table) sum in that order too, to the same last bit."""
    out = [0.0]
    acc = 0.0
    for w, g in sorted(ws, key=lambda e: e[0] / e[1]):
        r = w / g
        for _ in range(g):
            acc += r
            out.append(acc * (1 - 1e-9))
    return tuple(out)


GANG_WIDEN = 4  # a gang whose best nodes break a limit together looks this many times as far
# a gang tries at most this many victims that hold GPUs on several of its candidate
# nodes (GreedyPlanner._shared), cheapest first
SHARED_TRIES = 16
PAST_ROOM_CAP = 8  # see GreedyPlanner.room
SPARE_PENALTY = 1e9  # per GPU, in the spare_lower variant: dominates any eviction cost
SPARE_FREE = True  # the variant also spares free GPUs (usable by every lower tier)


class VictimUse:
    """Who takes which victim's GPUs in a plan being changed (ejection moves, moves
    to cheaper victims): victim -> placed jobs on its GPUs, and job -> those
    victims, so that a job leaving knows the victims only it used."""

    def __init__(self, owner: GpuOwners):
        self.owner = owner  # (node idx, GPU) -> running job
        self.users: dict[str, set[str]] = {}
        self.uses: dict[str, set[str]] = {}

    def link(self, j: str, parts: list[tuple[int, int]], victims: set[str]) -> None:
        """Job j holds GPUs ``parts``: it uses the ``victims`` that own some of them."""
        vs = self.uses.setdefault(j, set())
        for ni, m in parts:
            for v, _m in self.owner.on(ni, m):
                if v in victims:
                    vs.add(v)
                    self.users.setdefault(v, set()).add(j)

    def unlink(self, j: str) -> set[str]:
        """Job j leaves; the victims it used."""
        vs = self.uses.pop(j, set())
        for v in vs:
            self.users[v].discard(j)
        return vs

    def own(self, j: str) -> list[str]:
        """The victims only job j uses."""
        return sorted(v for v in self.uses.get(j, ()) if self.users.get(v) == {j})

    def unused(self, vs: Iterable[str]) -> list[str]:
        """Of ``vs``, the victims no placed job uses."""
        return sorted(v for v in vs if not self.users.get(v))


class GreedyPlanner:
    """Greedy minimum-cost placement, one job at a time.

    :meth:`solve` builds a plan. The ejection moves, the polishing passes and the
    baselines search and change plans through the public methods below, on a
    :class:`GreedyState`; each change keeps the state's change counters, so the
    planner's memoised options stay right:

    - reading: :meth:`available` (the GPUs a job may take on a node), :meth:`fits`,
      :meth:`allowed_victims`, :meth:`node_option`, :meth:`group_key`,
      :meth:`victims_order`, and the limits :meth:`storm_ok` (R11/R12),
      :meth:`budgets_ok` (R13, R15) and :meth:`within_limits` (both);
    - changing: :meth:`state_of` (the state a finished plan leaves),
      :meth:`placing` (the job whose victims come next, R15), :meth:`place` (the
      greedy search for one job), :meth:`evict`, :meth:`occupy`,
      :meth:`take_gpus`, :meth:`release` and :meth:`ban`.
    """

    name = "greedy"
    # evictable victims per node, cheapest first; (victim, node) -> its GPUs there (the
    # problem's, shared by every planner on it: read only), taken at their first use:
    # a run cut short within its first tier's jobs on free GPUs needs neither (at
    # 12,500 nodes they take 0.03 s to make)
    by_node: dict[int, list[str]]
    vmask: dict[tuple[str, int], int]

    if not TYPE_CHECKING:  # (the type checker sees the two attributes above only)
        def __getattr__(self, name: str) -> Any:
            if name in ("by_node", "vmask") and "p" in self.__dict__:
                self.by_node, self.vmask = self.p.victims_by_node()
                return self.__dict__[name]
            raise AttributeError(name)

    def __init__(self, problem: Problem, *, spare_lower: bool = False,
                 storm_price: float = 0.0, priced: frozenset[str] | None = None,
                 first: frozenset[str] = frozenset(), order: str = "size",
                 spare_free: bool = SPARE_FREE):
        self.p = problem
        # order: within a tier, larger jobs first ("size") or more important jobs
        # first ("priority"); a variant whose plan is kept when it is better
        if order not in ("size", "priority"):
            raise ValueError(f"order must be 'size' or 'priority', not {order!r}")
        self.order = order
        # first: jobs placed before the others of their tier (a second pass puts the
        # jobs the first pass deferred first: the "squeaky wheel")
        self.first = first
        # storm_price: weight per GB a victim flushes (R11/R12), so that where the
        # storage limit binds the storm budget goes to victims that free GPUs with
        # small checkpoints; a variant whose plan is kept when it is better
        self.storm_price = storm_price
        self.storm_rejected = False  # did the storm limit ever refuse an option?
        self.budget_rejected = False  # did an eviction budget (R13) ever refuse one?
        self.full_storages: set[str] = set()  # storages where it did
        self.refusals = 0  # options the storm limit or a budget refused
        self.unreached: list[str] = []  # the jobs solve() did not reach within its budgets
        self.free_only: list[str] = []  # ... and those it let take only free GPUs
        self.deferred = 0  # ... and how many it searched and did not place
        self.banned: set[str] = set()  # victims no option may use (see ban)
        # R15: are the victims of the job being placed exempt (its tier is)? Set by
        # placing() before every search and commit for one job
        self.placing_exempt = False
        # thrash.past_budget_gpu_s: once a state's victims use up what the window has
        # left (at the start of the tick, or with this tick's own evictions), every
        # further victim of an exempt job is past the budget and weighs that much more
        # (see past; the objective counts each victim past it)
        tb = problem.thrash
        self.past_penalty = tb.past_gpu_s if tb is not None else 0.0
        self.past_left = max(0, tb.left) if tb is not None else 0
        self.priced = priced  # storages whose flushes are priced (None: all)
        # spare_lower: a job prefers victims whose GPUs no less important pending job
        # could use (e.g. tier 1 evicts tier 2 rather than the tier-3 jobs that pending
        # tier-2 jobs need); a variant whose plan is kept when it is better.
        # spare_free: the variant also spares free GPUs, which lower tiers can use
        # without evicting. Where the storm limit binds this costs a tier its own
        # admissions: free GPUs are the only ones that flush nothing, and a job that
        # spares them evicts instead, spending the storm budget the tier's other
        # jobs needed (docs/planner.md, section 2)
        self.contested: dict[int, frozenset[int]] = {}
        self.free_penalty: dict[int, float] = {}  # tier -> weight per free GPU taken
        if spare_lower:
            for t in {i.job.tier for i in problem.pending.values()}:
                lower = [i for i in problem.pending.values()
                         if i.job.tier > t and i.held_until is None]
                self.contested[t] = frozenset().union(*(i.rights for i in lower))
                if lower and spare_free:
                    self.free_penalty[t] = SPARE_PENALTY  # free GPUs serve every tier
        self._cache: dict[tuple, tuple[int, list]] = {}
        self._rank: dict[str, tuple] = {}  # victim -> its place in victims_order
        self._grouped: dict[tuple, dict[int, tuple]] = {}  # see _grouped_option
        # loads fall only in release (re-placing a finished plan's jobs): it counts the
        # times each storage target's load fell, and any victim left when an eviction
        # budget is set; a memo entry of _grouped_option is kept while those of the
        # node's victims' storage targets stay as they were
        self._relief: dict[str | None, int] = {}
        self._reliefs = 0  # their sum (see ShapeHeap)
        self._limits_memo: dict[tuple, tuple] = {}  # see _limits
        self._bounds_st: GreedyState | None = None  # see _bounds_memo
        self._bounds: dict[tuple, dict[int, tuple]] = {}
        self._node_storages: dict[int, tuple] = {}
        self._heaps: dict[tuple, ShapeHeap] = {}
        self._group_index: dict[tuple, GroupIndex] = {}  # see _group_options
        # the snapshot's state, shared by every job shape (see _first_bounds)
        self._least_weight: dict[tuple, np.ndarray] = {}  # see _least_table

    # -- availability ---------------------------------------------------------------
    def available(self, st: GreedyState, info: PendingInfo, ni: int) -> int:
        """The GPUs of node ni the job may take: free ones, and those freed this tick
        by victims of tiers it may preempt (with ``thrash.exempt_if: all``, not those
        of exempt victims when its own tier is not exempt: R15)."""
        m = st.free.get(ni, 0)
        freed = st.freed.get(ni)
        if freed and info.rights:  # (a job without rights takes free GPUs alone)
            running, rights = self.p.running, info.rights
            tb = self.p.thrash
            keep_off = (st.exempt if tb is not None and tb.exempt_all
                        and info.job.tier not in tb.exempt_tiers else ())
            for vid, fm in freed.items():
                if running[vid].job.tier in rights and vid not in keep_off:
                    m |= fm
        return m

    def free_weight(self, info: PendingInfo) -> float:
        """What a shard of the job on free GPUs counts for (the option's first item:
        ``free_penalty`` per GPU)."""
        return self.free_penalty.get(info.job.tier, 0.0) * info.job.gpus_per_node

    def fits(self, ni: int, avail: int, info: PendingInfo) -> bool:
        """Does one shard of the job fit on GPUs ``avail`` of node ni (R3: connected
        when it needs NVLink)?"""
        return topo.layout_fits(self.p.nodes[ni].layout, avail, info.job.gpus_per_node,
                                info.need_nvlink)

    def storm_ok(self, st: GreedyState, new: list[str]) -> bool:
        """R11/R12: every flushing victim's need stays <= max_s under the new loads
        with victims ``new`` added. A refusal sets ``storm_rejected`` and adds the
        storage targets to ``full_storages``."""
        loads: dict[str, float] = {}
        caps: dict[str, float] = {}
        for v in new:
            vi = self.p.running[v]
            if vi.storage is not None and vi.flushing:
                s = vi.storage
                loads[s] = loads.get(s, st.loads.get(s, 0.0)) + vi.flush_gb
                caps[s] = min(caps.get(s, st.min_cap.get(s, float("inf"))), vi.storm_cap_gb)
        full = {s for s in loads if loads[s] > caps[s] + 1e-9}
        if full:
            self.refusals += 1
            self.storm_rejected = True
            self.full_storages |= full
        return not full

    def within_limits(self, st: GreedyState, new: list[str]) -> bool:
        """Do the storm limit (R11/R12) and the eviction budgets (R13, R15) hold with
        victims ``new`` added to the state's? (A refusal is counted, see
        :meth:`storm_ok`.)"""
        return self.storm_ok(st, new) and self.budgets_ok(st, new)

    def placing(self, info: PendingInfo) -> None:
        """The job whose options are searched and whose victims are evicted next
        (R15: its tier says whether they are exempt)."""
        self.placing_exempt = self.p.exempt(info.job.tier)

    def budgets_ok(self, st: GreedyState, new: list[str]) -> bool:
        """R13 and R15: do the eviction budgets of the tick (count, GPU fraction) and
        the rolling budget (unless every victim is exempt) hold with victims ``new``
        added? A refusal sets ``budget_rejected``."""
        if self._over_budgets(st, len(new),
                              sum(self.p.running[v].job.total_gpus for v in new)):
            self.refusals += 1
            self.budget_rejected = True
            return False
        return True

    def evictions_closed(self, st: GreedyState) -> bool:
        """Would the budgets (R13, and R15 unless every victim is exempt) refuse any
        victim more in this state, for the job being placed (:meth:`placing`)? Then
        every option with victims is refused, whatever its victims (each frees a GPU
        at least): the searches skip scoring them (on the 12,500-node benchmark
        cluster the spare variant's tier-2 jobs meet 43,000 such nodes once R15's
        window is spent)."""
        return self._over_budgets(st, 1, 1)

    def _over_budgets(self, st: GreedyState, count: int, gpus: int) -> bool:
        """Do ``count`` victims more, freeing ``gpus`` GPUs, break R15's window
        (unless every victim is exempt; no victim more never does) or the tick's
        budgets of R13?"""
        binds = bool(count) and not (self.placing_exempt and len(st.victims) == len(st.exempt))
        return self._over(len(st.victims) + count, st.evicted_gpus + gpus, binds)

    def closed_without(self, st: GreedyState, victims: int, gpus: int) -> bool:
        """:meth:`evictions_closed` for a job of a tier that is not exempt (R15 binds
        its victims), once ``victims`` of this state's victims, with ``gpus`` GPUs in
        all, are evicted no more (a placed job leaving with the victims only it
        used)."""
        return self._over(len(st.victims) - victims + 1, st.evicted_gpus - gpus + 1, True)

    def _over(self, n: int, g: int, r15: bool) -> bool:
        """Do ``n`` victims of ``g`` GPUs in all break R15's window (where ``r15``
        binds) or the tick's budgets of R13?"""
        tb = self.p.thrash
        if tb is not None and r15 and (n > tb.left or g > tb.gpus_left):
            return True  # R15: more than the window has left
        pol = self.p.policy
        return ((pol.max_evictions_per_tick is not None and n > pol.max_evictions_per_tick)
                or (pol.max_evicted_gpu_fraction is not None and g > (
                    pol.max_evicted_gpu_fraction * self.p.total_gpus_up_drain + 1e-9)))

    def _eviction_option(self, st: GreedyState, info: PendingInfo, ni: int,
                         base: int) -> tuple[float, list[str]] | None:
        """Cheapest victims on node ni (of tiers the job may preempt) that make it fit,
        among those the storm limit and the budgets still allow."""
        # the options' weights depend on the tier's contested tiers (spare variant)
        room = self.room(st, info)
        key = (ni, info.rights, self.contested.get(info.job.tier, frozenset()),
               info.job.gpus_per_node, info.need_nvlink, self.p.exempt(info.job.tier),
               room == 0)
        hit = self._cache.get(key)
        if hit is None or hit[0] != st.version.get(ni, 0):
            hit = (st.version.get(ni, 0), self._options(st, info, ni, base))
            self._cache[key] = hit
        options = hit[1]
        if room:  # (None: no penalty; 0: in every weight) victims past the room pay it
            tb, before = self.p.thrash, len(st.victims)
            assert tb is not None  # (room is None without R15)
            if any(tb.past_budget(before + n) for _c, n, _vs in options):
                options = sorted(((c + self.past_penalty * tb.past_budget(before + n), n, vs)
                                  for c, n, vs in options), key=lambda o: (o[0], o[1]))
        for cost, _n, vs in options:
            if self.within_limits(st, vs):
                return cost, vs
        return None

    def victims_order(self, vs: Iterable[str]) -> tuple:
        """Objective item 6's tie-break between victim sets of equal cost and count:
        victims of lower tiers, then of lower priority, then started most recently
        (smaller is preferred)."""
        ranks = []
        for v in vs:
            r = self._rank.get(v)
            if r is None:
                job = self.p.running[v].job
                started = job.started_at.timestamp() if job.started_at is not None else 0.0
                r = self._rank[v] = (-job.tier, job.priority, -started)
            ranks.append(r)
        return tuple(sorted(ranks))

    def room(self, st: GreedyState, info: PendingInfo) -> int | None:
        """``thrash.past_budget_gpu_s`` for the job in this state: None when it does
        not apply (off, or the job's tier is not exempt), else the victims still
        within what R15's window has left (capped at PAST_ROOM_CAP: the caches of
        options are kept per value). The objective counts each victim past it,
        ``max(0, victims - left)``: at 0 every victim weighs the penalty more (past),
        below the cap an option with more victims than the room pays it for those
        past it (_eviction_option); a gang's nodes are weighed one by one."""
        if self.past_penalty <= 0 or not self.p.exempt(info.job.tier):
            return None
        return min(max(0, self.past_left - len(st.victims)), PAST_ROOM_CAP)

    def past(self, st: GreedyState, info: PendingInfo) -> bool:
        """Do the job's victims each weigh ``thrash.past_budget_gpu_s`` more in this
        state (its tier is exempt and the window has nothing left)? See room."""
        return self.room(st, info) == 0

    def _weight(self, v: str, contested: frozenset[int], past: bool = False) -> float:
        """What evicting v counts for a job whose tier's contested tiers are given:
        its cost, plus the spare penalty and the storm price of the variants, plus the
        past-budget penalty for an exempt job (``past``) when the window is spent."""
        vi = self.p.running[v]
        w = vi.cost + (self.past_penalty if past else 0.0)
        if vi.job.tier in contested:
            w += SPARE_PENALTY * vi.job.total_gpus
        if self.storm_price and vi.flushing and (self.priced is None
                                                 or vi.storage in self.priced):
            w += self.storm_price * vi.flush_gb
        return w

    def allowed_victims(self, st: GreedyState, info: PendingInfo, ni: int) -> list[str]:
        """Node ni's running jobs that the job may still evict: evictable, not yet
        evicted, of a tier it may preempt, not banned (cheapest first)."""
        return [v for v in self.by_node.get(ni, ())
                if v not in st.victims and self.p.running[v].job.tier in info.rights
                and v not in self.banned]

    def _options(self, st: GreedyState, info: PendingInfo, ni: int,
                 base: int) -> list[tuple[float, int, list[str]]]:
        cands = self.allowed_victims(st, info, ni)
        if not cands:
            return []
        masks = {v: self.vmask[(v, ni)] for v in cands}
        total = base
        for v in cands:
            total |= masks[v]
        if not self.fits(ni, total, info):
            return []
        contested = self.contested.get(info.job.tier, frozenset())
        past = self.past(st, info)

        def weight(v: str) -> float:
            return self._weight(v, contested, past)

        if contested or self.storm_price:
            cands.sort(key=lambda v: (weight(v), v))
        options: list[tuple[float, int, list[str]]] = []
        for v in cands:  # single victims
            if self.fits(ni, base | masks[v], info):
                options.append((weight(v), 1, [v]))
        acc, chosen = base, []
        for v in cands:  # cheapest-first augmentation
            acc |= masks[v]
            chosen.append(v)
            if self.fits(ni, acc, info):
                # drop victims that are not needed, most expensive first
                for w in sorted(chosen, key=lambda w: -weight(w)):
                    rest = base
                    for x in chosen:
                        if x != w:
                            rest |= masks[x]
                    if len(chosen) > 1 and self.fits(ni, rest, info):
                        chosen.remove(w)
                options.append((sum(weight(w) for w in chosen), len(chosen), list(chosen)))
                break
        options.sort(key=lambda o: (o[0], o[1], self.victims_order(o[2]), o[2]))
        return options

    # -- commit ---------------------------------------------------------------------
    def evict(self, st: GreedyState, vs: list[str]) -> None:
        """Evict ``vs``: their GPUs become available to the jobs whose tiers may
        preempt theirs, their flushes join the storm loads, and they count against
        the budgets (exempt, R15, when the job being placed is; see :meth:`placing`)."""
        if vs:
            st.epoch += 1
        for v in vs:
            vi = self.p.running[v]
            st.victims.add(v)
            if self.placing_exempt:
                st.exempt.add(v)
            st.evicted_gpus += vi.job.total_gpus
            if vi.storage is not None and vi.flushing:
                st.loads[vi.storage] = st.loads.get(vi.storage, 0.0) + vi.flush_gb
                st.min_cap[vi.storage] = min(st.min_cap.get(vi.storage, float("inf")),
                                             vi.storm_cap_gb)
            for ni, m in vi.parts:
                st.version[ni] = st.version.get(ni, 0) + 1
                st.log.append(ni)
                if self.p.nodes[ni].node.state == "up":
                    st.freed.setdefault(ni, {})[v] = m

    def take_gpus(self, st: GreedyState, info: PendingInfo, ni: int) -> int:
        """Choose the GPUs of one shard of the job on node ni among those available to
        it (inside one NVLink clique when possible, best fit), occupy them and return
        their mask. The caller has checked that the shard fits."""
        avail = self.available(st, info, ni)
        node = self.p.nodes[ni]
        gpn = info.job.gpus_per_node
        mask = None
        if info.need_nvlink or gpn == 1:  # inside one NVLink clique when possible (best fit)
            fitting = sorted((isl for isl in node.islands if (avail & isl).bit_count() >= gpn),
                             key=lambda isl: ((avail & isl).bit_count(), isl & -isl))
            if fitting:
                mask = topo.layout_best_fit(node.layout, avail & fitting[0], gpn, True)
        if mask is None:
            mask = topo.layout_best_fit(node.layout, avail, gpn, info.need_nvlink)
        assert mask is not None
        self.occupy(st, ni, mask)
        return mask

    def group_key(self, info: PendingInfo, ni: int) -> tuple:
        """The block or NVLink domain of node ni that a gang keeping one must stay in
        (R2; ``models.rules.gang_group``)."""
        return gang_group(self.p.nodes[ni].node, info.job)

    def node_option(self, st: GreedyState, info: PendingInfo, ni: int) -> tuple | None:
        """The job's best option on node ni in this state: (cost, victims count,
        leftover GPUs, node id, node idx, victims), on available GPUs when it fits
        there, else with the cheapest victims that make it fit within the limits;
        None if there is none."""
        base = self.available(st, info, ni)
        node_id = self.p.nodes[ni].node.id
        if self.fits(ni, base, info):
            return (self.free_weight(info), 0, base.bit_count() - info.job.gpus_per_node,
                    node_id, ni, [])
        if info.rights:
            opt = self._eviction_option(st, info, ni, base)
            if opt is not None:
                # (for victims, the third item is objective item 6's tie-break, where a
                # free option has its leftover GPUs: options of one count compare alike)
                return (opt[0], len(opt[1]), self.victims_order(opt[1]), node_id, ni, opt[1])
        return None

    def _grouped_memo(self, st: GreedyState, info: PendingInfo) -> dict[int, tuple]:
        """The memo of :meth:`_grouped_option` for the job's shape in this state."""
        key = (info.job.tier, info.rights, info.job.gpus_per_node, info.need_nvlink,
               self.room(st, info))
        return self._grouped.setdefault(key, {})

    def _grouped_option(self, st: GreedyState, info: PendingInfo, ni: int,
                        memo: dict[int, tuple] | None = None) -> tuple | None:
        """:meth:`node_option` for gangs that keep one block or NVLink domain (the
        nodes their group search scores, :meth:`_best_group`): kept per job shape and
        node until the node changes (in solve() storm loads and budgets only grow, so
        a node that could not host the shape still cannot; an option with victims is
        checked against them again).
        Same options, 2x faster greedy plans for such gangs at 4,096 nodes. Loads fall
        only in :meth:`release`; an entry lasts until those its node's victims flush
        to (or any, with an eviction budget) fall. ``memo``: :meth:`_grouped_memo`,
        when the caller scores many nodes in one state."""
        if memo is None:
            memo = self._grouped_memo(st, info)
        version = st.version.get(ni, 0)
        ver: int | tuple[int, ...] = (version, *self._relief_key(ni)) if self._relief else version
        hit = memo.get(ni)
        if hit is not None and hit[0] == ver:
            opt = hit[1]
            if opt is None or not opt[5] or self.within_limits(st, opt[5]):
                return opt
        opt = self.node_option(st, info, ni)
        memo[ni] = (ver, opt)
        return opt

    def _relief_storages(self, ni: int) -> tuple:
        """None (the evictions, for the budgets), then the storage targets node ni's
        victims flush to: what its options' limits depend on."""
        ss = self._node_storages.get(ni)
        if ss is None:
            ss = self._node_storages[ni] = (None, *sorted(
                {s for v in self.by_node.get(ni, ())
                 if self.p.running[v].flushing and (s := self.p.running[v].storage)}))
        return ss

    def _relief_key(self, ni: int) -> tuple[int, ...]:
        """How often the loads that node ni's options depend on fell."""
        return tuple(self._relief.get(s, 0) for s in self._relief_storages(ni))

    def _limits(self, st: GreedyState, ss: tuple) -> tuple[float, ...]:
        """What the options of a node whose _relief_storages are ``ss`` face: the
        evictions so far, and the load and the tightest cap of each of its storage
        targets (rounded: loads are summed again when they fall). Kept until the
        victims change (st.epoch)."""
        hit = self._limits_memo.get(ss)
        if hit is not None and hit[0] == st.epoch and hit[1] is st:
            return hit[2]
        out: list[float] = [len(st.victims), st.evicted_gpus, len(st.victims) - len(st.exempt)]
        for s in ss[1:]:
            out += [round(st.loads.get(s, 0.0), 6), st.min_cap.get(s, math.inf)]
        self._limits_memo[ss] = (st.epoch, st, tuple(out))
        return self._limits_memo[ss][2]

    @staticmethod
    def _looser(now: tuple[float, ...], then: tuple[float, ...]) -> bool:
        """Are limits ``now`` looser than ``then``: fewer evictions (in all, by GPUs,
        or not exempt), or a lower load or a higher cap on one of the storage
        targets? (Otherwise options refused then are refused again: the limits only
        tightened.)"""
        return (now[0] < then[0] or now[1] < then[1] or now[2] < then[2]
                or any(now[i] < then[i] or now[i + 1] > then[i + 1]
                       for i in range(3, len(now), 2)))

    def _bounds_memo(self, st: GreedyState, info: PendingInfo) -> dict[int, tuple]:
        """The memo of :meth:`_bound` for the job's shape in state ``st``: node ->
        (its version, the entry). A node's entry depends on the node's state (its
        version) and on the tier, rights, shard and ``past``, not on the candidate
        list: shapes that differ only there (at 12,500 nodes, 104 heaps of 30 such
        shapes, each scoring every changed node) share it."""
        if self._bounds_st is not st:
            self._bounds_st, self._bounds = st, {}
        if not info.rights:  # (free GPUs alone: the same for every tier but its weight)
            return self._bounds.setdefault((None, info.job.gpus_per_node, info.need_nvlink),
                                           {})
        return self._bounds.setdefault((info.job.tier, info.rights, info.job.gpus_per_node,
                                        info.need_nvlink, self.past(st, info)), {})

    def _bound(self, st: GreedyState, info: PendingInfo, ni: int,
               memo: dict[int, tuple] | None = None) -> tuple | None:
        """A node's heap entry: where the job fits the GPUs available to it, its exact
        option there (victims ``[]``, as :meth:`node_option` gives it); else a cheap
        lower bound on its option that sorts before any exact option with the same
        cost (``()`` where leftover GPUs go; victims None); None when the node cannot
        host the job even by evicting every allowed victim. ``memo``:
        :meth:`_bounds_memo`, when the caller scores many nodes in one state."""
        if memo is None:
            memo = self._bounds_memo(st, info)
        version = st.version.get(ni, 0)
        hit = memo.get(ni)
        if hit is None or hit[0] != version:
            hit = memo[ni] = (version, self._bound_now(st, info, ni))
        b = hit[1]
        if b is None or b[6] is None:
            return b
        if not info.rights:  # (the memo of every tier: this tier's weight)
            return (self.free_weight(info), *b[1:6], [])
        return (*b[:6], [])  # (a list of its own)

    def _bound_now(self, st: GreedyState, info: PendingInfo, ni: int) -> tuple | None:
        """:meth:`_bound`, worked out."""
        base = self.available(st, info, ni)
        node_id = self.p.nodes[ni].node.id
        if self.fits(ni, base, info):
            return (self.free_weight(info), 0, base.bit_count() - info.job.gpus_per_node,
                    node_id, ni, st.version.get(ni, 0), [])
        if not info.rights:
            return None
        # every option evicts allowed victims that free the GPUs missing: the least
        # weight of such victims, fractional, is a bound (see cover_bounds)
        contested = self.contested.get(info.job.tier, frozenset())
        past = self.past(st, info)
        ws = [(self._weight(v, contested, past), self.vmask[(v, ni)].bit_count())
              for v in self.by_node.get(ni, ())
              if v not in st.victims and self.p.running[v].job.tier in info.rights]
        need = info.job.gpus_per_node - base.bit_count()
        bounds = cover_bounds(ws)
        if not ws or need >= len(bounds):
            return None
        return (bounds[max(need, 1)], 1, (), node_id, ni, st.version.get(ni, 0), None)

    def _least_table(self, info: PendingInfo, contested: frozenset[int],
                     past: bool) -> np.ndarray:
        """Per node and number k of GPUs missing, the bound (cover_bounds) on an option
        that evicts allowed victims of the snapshot's state to free k (inf: none can);
        one table per rights, contested tiers and past (shared by every job shape)."""
        wkey = (info.rights, contested, past)
        tab = self._least_weight.get(wkey)
        if tab is None:
            tab = self._least_weight[wkey] = self._cover_table(info.rights, contested, past)
        return tab

    def _cover_table(self, rights: frozenset[int], contested: frozenset[int],
                     past: bool) -> np.ndarray:
        """:meth:`_least_table`, worked out in numpy from the problem's victim
        columns: the victims of tiers in ``rights`` weighed as :meth:`_weight` does,
        each node's cut into single GPUs (weight / GPUs each) taken cheapest per GPU
        first (ties in the node's victim order, as cover_bounds sorts), their running
        sums the node's row: cover_bounds's numbers, summed in its order."""
        _free, most = self.p.node_arrays()
        tab = np.full((len(self.p.nodes), most + 1), np.inf)
        a = self.p.victim_arrays()
        keep = np.isin(a["tier"], np.fromiter(rights, np.int64, len(rights)))
        if not keep.any():
            return tab
        node, g, tier = a["node"][keep], a["gpus"][keep], a["tier"][keep]
        w = a["cost"][keep] + (self.past_penalty if past else 0.0)
        if contested:
            w = w + np.where(np.isin(tier, np.fromiter(contested, np.int64, len(contested))),
                             SPARE_PENALTY * a["total"][keep], 0.0)
        if self.storm_price:
            flush, store = a["flush_gb"][keep], a["storage"][keep]
            priced = a["flushing"][keep]
            if self.priced is not None:
                names = a["storages"]
                priced &= np.isin(store, [i for i, s in enumerate(names) if s in self.priced])
            w = w + np.where(priced, self.storm_price * flush, 0.0)
        ratio = w / g
        order = np.lexsort((np.arange(len(node)), ratio, node))
        node, g, ratio = node[order], g[order], ratio[order]
        unit_node = np.repeat(node, g)
        first = np.ones(len(unit_node), dtype=bool)  # each node's first GPU unit
        first[1:] = unit_node[1:] != unit_node[:-1]
        starts = np.nonzero(first)[0]
        counts = np.diff(np.append(starts, len(unit_node)))
        row = np.repeat(np.arange(len(starts)), counts)  # the unit's node, as a row
        k = np.arange(len(unit_node)) - np.repeat(starts, counts)  # its place there
        # running sums node by node (one row each: a sum over the whole cluster
        # would lose the small weights' last digits next to the spare penalty's)
        units = np.zeros((len(starts), most))
        units[row, k] = np.repeat(ratio, g)
        tab[unit_node, k + 1] = np.cumsum(units, axis=1)[row, k] * (1 - 1e-9)
        tab[node, 0] = 0.0
        return tab

    def _first_order(self, info: PendingInfo, past: bool) -> tuple[list, list, list, list]:
        """``_bound`` of every candidate node in the snapshot's state (nothing changed
        yet; ``past``: as :meth:`past` says in the state it is asked in), sorted as
        heap entries sort (cost, then free before victims, leftover GPUs, node id):
        costs, victims counts (0 or 1), node indices, free options' leftover GPUs.
        From tables shared by every shape (free_fits, _least_table), in numpy."""
        gpn = info.job.gpus_per_node
        cand = self.p.candidate_array(info)
        fits = self.p.free_fits_array(gpn, info.need_nvlink)[cand]
        free, most = self.p.node_arrays()
        cost = np.full(len(cand), np.inf)
        if info.rights:
            tab = self._least_table(info, self.contested.get(info.job.tier, frozenset()),
                                    past)
            miss = np.maximum(gpn - free[cand], 1)
            ok = miss <= most
            cost[ok] = tab[cand[ok], miss[ok]]
        cost[fits] = self.free_weight(info)
        keep = np.nonzero(np.isfinite(cost))[0]
        cost, count, nis = cost[keep], (~fits[keep]).astype(np.int64), cand[keep]
        left = np.where(count == 0, free[nis] - gpn, 0)  # a free option's leftover GPUs
        order = np.lexsort((nis, left, count, cost))  # (node indices are in id order)
        return (cost[order].tolist(), count[order].tolist(), nis[order].tolist(),
                left[order].tolist())

    def _first_entry(self, first: tuple[list, list, list, list], k: int) -> tuple:
        """The heap entry of the k-th node of ``first`` (:meth:`_first_order`), as
        :meth:`_bound` gives it: an exact free option, or a bound."""
        cost, count, ni = first[0][k], first[1][k], first[2][k]
        if count:
            return (cost, 1, (), self.p.nodes[ni].node.id, ni, 0, None)
        return (cost, 0, first[3][k], self.p.nodes[ni].node.id, ni, 0, [])

    def _advance(self, ch: ShapeHeap) -> None:
        """Put the next bound of ``ch.first`` in the heap (front): every bound after
        it sorts after it, so the heap's top is the least of all."""
        if ch.k < len(ch.first[0]):
            ch.front = self._first_entry(ch.first, ch.k)
            heapq.heappush(ch.heap, ch.front)
            ch.k += 1
        else:
            ch.front = None

    def _changed_bounds(self, st: GreedyState, info: PendingInfo) -> list[tuple]:
        """``_bound`` for the job's candidate nodes that changed (version > 0)."""
        members = self.p.candidate_set(info)
        memo = self._bounds_memo(st, info)
        return [b for ni in sorted(ni for ni, v in st.version.items() if v and ni in members)
                if (b := self._bound(st, info, ni, memo)) is not None]

    def _first_bounds(self, st: GreedyState, info: PendingInfo) -> list[tuple]:
        """``_bound`` for every candidate node of a job shape, sorted: nodes nothing
        has changed yet (version 0) from :meth:`_first_order`, the others one by one."""
        first = self._first_order(info, self.past(st, info))
        version = st.version
        out = [e for k in range(len(first[0]))
               if not version.get((e := self._first_entry(first, k))[4], 0)]
        return sorted(out + self._changed_bounds(st, info))

    def _best_nodes(self, st: GreedyState, info: PendingInfo, m: int) -> list[tuple]:
        """The m best node options for a job (distinct nodes), via the class heap.

        Nodes enter the heap with a lower bound and are scored exactly only when
        they reach the top (best-first search), so a job usually looks at a few
        nodes instead of all of them."""
        # the tier too: bounds and options carry its weights (free and contested GPUs)
        key = (info.job.tier, info.rights, info.job.gpus_per_node, info.need_nvlink,
               id(info.candidates), self.room(st, info))
        ch = self._heaps.get(key)
        if ch is None:
            ch = ShapeHeap(members=self.p.candidate_set(info),
                           heap=self._changed_bounds(st, info),
                           first=self._first_order(info, self.past(st, info)))
            heapq.heapify(ch.heap)
            self._advance(ch)
            ch.pos = len(st.log)
            ch.reliefs = self._reliefs
            self._heaps[key] = ch
        else:
            back = set(st.log[ch.pos:]) & ch.members
            if ch.reliefs != self._reliefs:
                for ss, by_then in ch.dropped.items():
                    now = self._limits(st, ss)
                    for then in [t for t in by_then if t != now and self._looser(now, t)]:
                        back.update(by_then.pop(then))
                ch.reliefs = self._reliefs
            memo = self._bounds_memo(st, info) if back else {}
            for ni in sorted(back):
                b = self._bound(st, info, ni, memo)
                if b is not None:
                    heapq.heappush(ch.heap, b)
            ch.pos = len(st.log)
        chosen: list[tuple] = []
        seen: set[int] = set()
        # (the budgets cannot change while this job's search goes on)
        closed = bool(info.rights) and self.evictions_closed(st)
        while ch.heap and len(chosen) < m:
            e = heapq.heappop(ch.heap)
            if e is ch.front:
                self._advance(ch)
            ni = e[4]
            if ni in seen or e[5] != st.version.get(ni, 0):
                continue  # stale: the node changed and was re-scored
            if e[6] is None and closed:
                # a bound on victims no budget allows: refused, unscored (kept with
                # those the limits refused, below, in case they loosen)
                self.refusals += 1
                self.budget_rejected = True
                self._set_aside(ch, st, ni)
                continue
            if e[6] is None or (e[6] and not self.within_limits(st, e[6])):
                # a bound, or an option the limits no longer allow: score it now
                refused = self.refusals
                opt = self.node_option(st, info, ni)
                if opt is not None:
                    heapq.heappush(ch.heap, (*opt[:5], e[5], opt[5]))
                elif self.refusals != refused:  # (a limit, not the node, said no)
                    self._set_aside(ch, st, ni)
                continue
            chosen.append(e)
            seen.add(ni)
        for e in chosen:
            heapq.heappush(ch.heap, e)
        return [(e[0], e[2], e[4], e[6]) for e in chosen]

    def _set_aside(self, ch: ShapeHeap, st: GreedyState, ni: int) -> None:
        """Node ni leaves the shape's heap because a limit refused it: kept in
        ``ch.dropped`` with the limits it faced, to come back when they loosen."""
        ss = self._relief_storages(ni)
        ch.dropped.setdefault(ss, {}).setdefault(self._limits(st, ss), []).append(ni)

    def place(self, st: GreedyState, info: PendingInfo) -> list[tuple[int, int]] | None:
        """Place one job by the greedy search: evict its victims, occupy its GPUs and
        return its (node idx, GPU mask) parts; None (the state unchanged) when it
        finds no place."""
        self.placing(info)
        job = info.job
        chosen: list | None
        if not keeps_group(job):
            chosen = self._best_nodes(st, info, job.nodes)
            if len(chosen) < job.nodes:
                chosen = None
            elif job.nodes > 1 and self._together(st, chosen, job.nodes) is None:
                # the best nodes' victims together break a limit: the best nodes that
                # stay within it, among GANG_WIDEN times as many
                wider = self._best_nodes(st, info, GANG_WIDEN * job.nodes)
                chosen = (self._together(st, wider, job.nodes)
                          or self._rescued(st, wider, job.nodes))
        else:
            best = self._best_group(st, info)
            chosen = None if best is None else best[2]
        if job.nodes > 1 and info.rights:
            # (also where none was found: fewer victims may stay within the budgets)
            chosen = self._shared(st, info, chosen) or chosen
        if chosen is None:
            return None
        new: list[str] = []
        for o in chosen:
            for v in o[3]:
                if v not in new:
                    new.append(v)
        self.evict(st, new)
        return [(o[2], self.take_gpus(st, info, o[2])) for o in chosen]

    def _set_cost(self, st: GreedyState, info: PendingInfo, options: list) -> float:
        """What a gang's node options (cost, _, node idx, victims) cost together: the
        free options' weights, and each victim's weight once (a victim with GPUs on
        several of the nodes is evicted once)."""
        contested = self.contested.get(info.job.tier, frozenset())
        past = self.past(st, info)
        vs = {v for o in options for v in o[3]}
        return (sum(o[0] for o in options if not o[3])
                + sum(self._weight(v, contested, past) for v in vs))

    def _quiet_limits(self, st: GreedyState, vs: list[str]) -> bool:
        """:meth:`within_limits` for a trial: a refusal leaves no trace in the
        counters and flags the portfolio reads."""
        saved = (self.refusals, self.storm_rejected, self.budget_rejected,
                 set(self.full_storages))
        ok = self.within_limits(st, vs)
        (self.refusals, self.storm_rejected, self.budget_rejected,
         self.full_storages) = saved
        return ok

    def _shared(self, st: GreedyState, info: PendingInfo, chosen: list | None) -> list | None:
        """A gang's nodes around one victim that holds GPUs on several of them, when
        that costs less than ``chosen``. The node searches weigh each node's option
        alone, so a victim with GPUs on k of the gang's nodes counts k times there,
        although it is evicted once (a 7-node gang evicting a 7-node gang costs the
        victim's cost, not seven times it). Victims with GPUs on two or more of the
        job's candidate nodes are tried cheapest first (at most ``SHARED_TRIES``, and
        only while one alone costs less than ``chosen`` together): the nodes where a
        shard fits with the victim's GPUs and those available, then the best other
        options (of the same block or NVLink domain when the gang keeps one). The
        cheapest set within the storm limit and the budgets is returned, or None.
        ``chosen`` None: the node searches found no nodes within the limits, which
        fewer victims may still respect."""
        multi = self.p.multi_node_victims()
        if (not multi or (chosen is not None and not any(o[3] for o in chosen))
                or self.evictions_closed(st)):
            return None
        n, running = info.job.nodes, self.p.running
        best_cost = math.inf if chosen is None else self._set_cost(st, info, chosen)
        best: list | None = None
        members = self.p.candidate_set(info)
        group = keeps_group(info.job)
        contested = self.contested.get(info.job.tier, frozenset())
        past = self.past(st, info)
        tried = 0
        for v in multi:
            vi = running[v]
            if vi.cost >= best_cost or tried >= SHARED_TRIES:
                break  # (a weight is at least the cost: none after can do better)
            if v in st.victims or v in self.banned or vi.job.tier not in info.rights:
                continue
            nodes = sorted(ni for ni, _m in vi.parts if ni in members)  # (in id order)
            if len(nodes) < 2:
                continue
            tried += 1
            w = self._weight(v, contested, past)
            fit = [ni for ni in nodes
                   if self.fits(ni, self.available(st, info, ni) | self.vmask[(v, ni)], info)]
            if len(fit) < 2:
                continue
            if group:  # the group (block or NVLink domain) holding most of them
                by: dict[tuple, list[int]] = {}
                for ni in fit:
                    by.setdefault(self.group_key(info, ni), []).append(ni)
                key, fit = max(by.items(), key=lambda kv: (len(kv[1]), str(kv[0])))
            picked = [(w, 0, ni, [v]) for ni in fit[:n]]
            if len(picked) < n:
                inside = set(nodes)
                if group:
                    gi, memo = self._group_options(st, info)
                    if key not in gi.ranked:
                        continue
                    others = self._checked_group(st, info, gi, key, memo)
                else:
                    others = self._best_nodes(st, info, n + len(inside))
                others = [o for o in others if o[2] not in inside]
                picked += others[:n - len(picked)]
                if len(picked) < n:
                    continue
            cost = self._set_cost(st, info, picked)
            if cost < best_cost * (1 - 1e-9):
                vs = sorted({x for o in picked for x in o[3]})
                if self._quiet_limits(st, vs):
                    best, best_cost = picked, cost
        return best

    def _group_options(self, st: GreedyState, info: PendingInfo
                       ) -> tuple[GroupIndex, dict[int, tuple]]:
        """The :class:`GroupIndex` of a gang's shape in this state, brought up to date
        with the nodes changed since it was last used; and the memo it reads."""
        job = info.job
        key = (job.tier, info.rights, job.gpus_per_node, info.need_nvlink,
               self.room(st, info), id(info.candidates), job.same_block,
               job.same_nvlink_domain)
        memo = self._grouped_memo(st, info)
        gi = self._group_index.get(key)
        if gi is None or gi.st is not st or gi.reliefs != self._reliefs:
            group_of, groups = self.p.gang_groups(info)
            opts: dict[int, tuple | None] = dict.fromkeys(info.candidates)
            for b in self._first_bounds(st, info):
                opts[b[4]] = (*b[:5], b[6])
            gi = GroupIndex(st=st, pos=len(st.log), reliefs=self._reliefs,
                            members=self.p.candidate_set(info), group_of=group_of,
                            groups=groups, opts=opts, dirty=set(groups))
            self._group_index[key] = gi
        elif gi.pos < len(st.log):
            for ni in set(st.log[gi.pos:]) & gi.members:
                nb = self._bound(st, info, ni)
                gi.opts[ni] = None if nb is None else (*nb[:5], nb[6])
                gi.dirty.add(gi.group_of[ni])
            gi.pos = len(st.log)
        for g in gi.dirty:
            self._rank_group(gi, g)
        gi.dirty.clear()
        return gi, memo

    @staticmethod
    def _rank_group(gi: GroupIndex, g: tuple) -> None:
        """Group g's options in the order a gang takes them: cost, victims count,
        leftover GPUs (objective item 6 for victims), node id."""
        gi.ranked[g] = sorted((o for ni in gi.groups[g] if (o := gi.opts[ni]) is not None),
                              key=lambda e: e[:4])

    def _checked_group(self, st: GreedyState, info: PendingInfo, gi: GroupIndex,
                       g: tuple, memo: dict[int, tuple]) -> list:
        """Group g's options now, best first, as (cost, leftover, node idx, victims):
        its nodes known by a bound only, and those whose victims the limits no longer
        allow, scored."""
        changed = False
        for e in gi.ranked[g]:
            if e[5] is None or (e[5] and not self.within_limits(st, e[5])):
                gi.opts[e[4]] = self._grouped_option(st, info, e[4], memo)
                changed = True
        if changed:
            self._rank_group(gi, g)
        return [(e[0], e[2], e[4], e[5]) for e in gi.ranked[g]]

    def _best_group(self, st: GreedyState, info: PendingInfo) -> tuple | None:
        """For a gang that keeps one block or NVLink domain: per group (block or
        NVLink domain) its cheapest nodes whose victims together stay within the storm
        limit and the budgets; the cheapest group, ties by key, as (cost, key name,
        options); None if none.

        A group's cheapest n options regardless of the limits bound its cost from
        below, and are its choice when they stay within them. Groups are taken by
        the bound of their kept options (:class:`GroupIndex`: lower still) and checked
        against the limits only while that bound can beat the best found, which is
        therefore the cheapest over every group."""
        n = info.job.nodes
        gi, memo = self._group_options(st, info)
        bounds = sorted((sum(e[0] for e in ranked[:n]), str(g), g)
                        for g, ranked in gi.ranked.items() if len(ranked) >= n)
        best = None
        for pick in (self._together, self._rescued):  # the rescue only if none fits
            for bound, name, g in bounds:
                if best is not None and bound > best[0]:
                    break
                grp = self._checked_group(st, info, gi, g, memo)
                if len(grp) < n or (best is not None
                                    and sum(o[0] for o in grp[:n]) > best[0]):
                    continue
                found = pick(st, grp, n)
                if found is not None:
                    cand = (sum(o[0] for o in found), name, found)
                    if best is None or cand[:2] < best[:2]:
                        best = cand
            if best is not None:
                break
        return best

    def _together(self, st: GreedyState, options: list, n: int) -> list | None:
        """The first ``n`` of a gang's node options (best first) whose victims
        together stay within the storm limit (R11/R12) and the budgets (R13), passing
        over those that would break them; None if fewer than n do. (Each option was
        checked alone; their victims together may still be too many.)"""
        picked: list = []
        acc: list[str] = []
        for o in options:
            vs = [v for v in o[3] if v not in acc]
            if vs and not self.within_limits(st, acc + vs):
                continue
            picked.append(o)
            acc += vs
            if len(picked) == n:
                return picked
        return None

    def _rescued(self, st: GreedyState, options: list, n: int) -> list | None:
        """A gang's last chance when :meth:`_together` found no nodes anywhere.

        A storage target's limit is the tightest cap of the victims flushing to it
        (R12), so one cheap option whose victim has a low cap can refuse every later
        option, although without it n would fit. For each cap t of the options
        (the lowest left out: :meth:`_together` tried it), :meth:`_together` on the
        options whose tightest cap is at least t; the cheapest n found. Only a
        rescue: where :meth:`_together` finds nodes, the cheaper nodes found here
        would spend storm budget that the jobs after the gang need."""
        if len(options) <= n:
            return None
        tight = [self._tightest_cap(o[3]) for o in options]
        best = None
        for t in sorted(set(tight))[1:]:
            kept = [o for o, c in zip(options, tight) if c >= t]
            if len(kept) < n:
                break
            cand = self._together(st, kept, n)
            if cand is not None:
                cost = sum(o[0] for o in cand)
                if best is None or cost < best[0]:
                    best = (cost, cand)
        return None if best is None else best[1]

    def _tightest_cap(self, vs: list[str]) -> float:
        """The lowest storm cap (GB) among victims ``vs`` that flush to a storage
        target (inf when none does)."""
        running = self.p.running
        return min((running[v].storm_cap_gb for v in vs
                    if running[v].flushing and running[v].storage is not None),
                   default=math.inf)

    def queue(self) -> list[PendingInfo]:
        """The order in which pending jobs are placed (subclasses change it)."""
        order = job_order(self.p, self.order)
        if self.first:  # stable: objective order otherwise
            order.sort(key=lambda i: (i.job.tier, i.job.id not in self.first))
        return order

    def solve(self, budget: Budget | None = None, quick: float = 0.0,
              least: float = 0.0, later: CutKeep | None = None,
              free_first: bool = False, search_s: float = 0.0) -> Decision:
        """The greedy plan: every job of :meth:`queue` placed in turn where
        :meth:`place` puts it, until ``budget`` ends; ``unreached`` then lists the jobs
        not reached. With ``quick`` (the seconds a job's search on free GPUs alone
        takes), the search for victims stops once the time left would only just hold
        the jobs left on free GPUs alone (in the first tier, the tier's own, plus
        ``search_s``, what one search for victims may take: its victims come before
        any lower tier's job), and the jobs after take only free GPUs (``free_only``
        lists those that may evict). ``later``: the run may also go on until what the
        plan holds so far needs of ``later.whole`` (CutKeep) is left, when that is
        later (a plan that holds less takes less time to assemble and check). The loop
        gets ``least`` seconds at least, however little ``budget`` has left. The plan
        so far is valid either way, with the jobs first in the order (higher tiers
        first) placed.

        ``free_first`` (for a short time limit on a big cluster): each tier's jobs are
        placed on free GPUs alone first, then those of them not placed are searched
        for victims, in the same order, as time allows: a plan cut short within a
        tier holds at least what free GPUs give the tier. ``quick`` then counts the
        tier's jobs left, and each tier searches again if the time left holds its
        jobs (objective order: a higher tier's victims before any lower tier's
        job)."""
        st = GreedyState(free={n.idx: n.free for n in self.p.nodes if n.free})
        d = Decision()
        self.unreached, self.free_only = [], []
        order = [i for i in self.queue() if i.candidates]
        # (job, its free pass?): with free_first, each tier's jobs on free GPUs alone,
        # then those of them not placed that may evict, searched for victims
        work: list[tuple[PendingInfo, bool]] = []
        if free_first:
            for _tier, jobs in groupby(order, key=lambda i: i.job.tier):
                tier_jobs = list(jobs)
                work += [(i, True) for i in tier_jobs] + [(i, False) for i in tier_jobs
                                                          if i.rights]
        else:
            work = [(i, False) for i in order]
        late = False
        deferred = 0  # jobs searched and not placed (explained in full: CutKeep)
        # where the jobs the quick rule counts end: with free_first each tier's own
        # (a new tier searches again if the time allows), else all, except for the
        # first tier's own (its victims come before any lower tier's job)
        ends = dict.fromkeys((i.job.tier for i in order), len(work))
        first = work[0][0].job.tier if work else 0
        for k, (info, _free) in enumerate(work):
            if free_first or info.job.tier == first:
                ends[info.job.tier] = k + 1
        # (a search for victims can take much longer than a free one: the first of a
        # shape builds its heap over every candidate node)
        margin = {first: search_s} if not free_first else {}
        if budget is not None and budget.wall and budget.left() < least:
            # counted from here: the set-up above took its time (with hundreds of
            # thousands of pending jobs, seconds)
            budget = Budget(least)
        for k, (info, free) in enumerate(work):
            if free_first and k and info.job.tier != work[k - 1][0].job.tier:
                late = False
            if free_first and not free and info.job.id in d.placements:
                continue  # placed by its free pass
            if budget is not None and budget.wall:
                left = budget.left()
                if later is not None:
                    left = max(left, later.whole.left() - later.keep_s(
                        len(d.placements), deferred, len(st.victims)))
                if left <= 0:
                    rest = work[k:]
                    self.unreached = [i.job.id for i, f in rest if f or not free_first]
                    not_reached = set(self.unreached)  # (and those whose free pass ran:)
                    self.free_only += [i.job.id for i, f in rest if free_first and not f
                                       and i.job.id not in d.placements
                                       and i.job.id not in not_reached]
                    break
                if not late and not free and quick and left <= (
                        quick * (ends[info.job.tier] - k) + margin.get(info.job.tier, 0.0)):
                    late = True
            # its last search: not a free pass before a search for victims, nor a free
            # pass for want of time (free_only)
            last = not late and not (free and info.rights)
            if info.rights and (free or late):
                info = replace(info, rights=frozenset())
                if not free:
                    self.free_only.append(info.job.id)
                    if free_first:
                        continue  # (its free pass found no place)
            self.placing(info)
            parts = self.place(st, info)
            if parts is not None:
                d.placements[info.job.id] = parts
            elif last:
                deferred += 1
        d.victims = set(st.victims)
        self.deferred = deferred
        return d

    # -- re-placing jobs of a finished plan -------------------------------------------
    def state_of(self, d: Decision) -> GreedyState:
        """The greedy state a decision leaves: GPUs not used, victims' GPUs not used,
        storm loads, tightest caps, evicted GPUs; every node it touches is marked
        changed, so that the heaps score it from this state."""
        st = GreedyState(free={n.idx: n.free for n in self.p.nodes if n.free})
        exempt = exempt_victims(self.p, preemptors_of(self.p, d))
        for flag in (True, False):  # R15: the victims of exempt jobs, then the others
            self.placing_exempt = flag
            self.evict(st, sorted(v for v in d.victims if (v in exempt) == flag))
        for _j, parts in sorted(d.placements.items()):
            for ni, m in parts:
                self.occupy(st, ni, m)
        return st

    def ban(self, st: GreedyState, vs: set[str]) -> None:
        """No option may evict ``vs`` (an empty set lifts the ban); their nodes count
        as changed, so that they are scored again."""
        for v in self.banned ^ vs:
            for ni, _m in self.p.running[v].parts:
                st.version[ni] = st.version.get(ni, 0) + 1
                st.log.append(ni)
        self.banned = set(vs)

    def occupy(self, st: GreedyState, ni: int, mask: int) -> None:
        """Mark GPUs ``mask`` of node ni as taken by a job (the caller has checked
        that they are available to it)."""
        st.free[ni] = st.free.get(ni, 0) & ~mask
        for vid in list(st.freed.get(ni, {})):
            st.freed[ni][vid] &= ~mask
        st.version[ni] = st.version.get(ni, 0) + 1
        st.log.append(ni)

    def release(self, st: GreedyState, ni: int, mask: int, drop: list[str]) -> None:
        """Give back a job's GPUs ``mask`` on node ni and un-evict ``drop`` (victims
        no one else uses): their GPUs are theirs again, their flush load goes."""
        node = self.p.nodes[ni]
        # _grouped_option's "cannot host" entries assume loads only grow (storage None:
        # every node, when an eviction budget is set)
        pol = self.p.policy
        for s in {self.p.running[v].storage for v in drop if self.p.running[v].flushing} | (
                {None} if drop and (pol.max_evictions_per_tick is not None
                                    or pol.max_evicted_gpu_fraction is not None
                                    or self.p.thrash is not None) else set()):
            self._relief[s] = self._relief.get(s, 0) + 1
            self._reliefs += 1
        if drop:
            st.epoch += 1
        for v in drop:
            vi = self.p.running[v]
            st.victims.discard(v)
            st.exempt.discard(v)
            st.evicted_gpus -= vi.job.total_gpus
            for n2, m2 in vi.parts:
                st.freed.get(n2, {}).pop(v, None)
                st.version[n2] = st.version.get(n2, 0) + 1
                st.log.append(n2)
        for s in {self.p.running[v].storage for v in drop if self.p.running[v].flushing}:
            if s is None:
                continue
            left = [self.p.running[v] for v in st.victims
                    if self.p.running[v].storage == s and self.p.running[v].flushing]
            st.loads[s] = sum(vi.flush_gb for vi in left)
            st.min_cap[s] = min((vi.storm_cap_gb for vi in left), default=float("inf"))
        back = mask & node.free
        if back:
            st.free[ni] = st.free.get(ni, 0) | back
        for owner, m in self.p.owner.on(ni, mask):
            if owner in st.victims:
                st.freed.setdefault(ni, {})[owner] = st.freed[ni].get(owner, 0) | m
        st.version[ni] = st.version.get(ni, 0) + 1
        st.log.append(ni)

    def cheaper_placements(self, d: Decision, budget: Budget | None = None
                           ) -> tuple[Decision, int]:
        """Re-place single-node jobs of a finished plan where their cheapest option
        now (next to every other job of the plan, within the storm limit and the
        budgets) costs less than the victims only they use; the better plan and the
        number of moves. Largest savings first; stops early at the end of ``budget``.

        Every job stays admitted, so objective items 1-3 do not change and the
        eviction cost (item 4) falls. Options come from the same search as a greedy
        plan's (rights R7/R10, NVLink R3, candidate nodes, R11/R12, R13), so the
        plan stays valid. Meant for a planner without the spare and storm-price
        variants: it compares eviction costs."""
        st = self.state_of(d)
        placements = dict(d.placements)
        use = VictimUse(self.p.owner)
        for j, parts in placements.items():
            use.link(j, parts, st.victims)
        own = use.own

        def movable(j: str) -> bool:  # single-node jobs, and gangs free to use any nodes
            return not keeps_group(self.p.pending[j].job)

        order = sorted((-sum(self.p.running[v].cost for v in own(j)), j)
                       for j in placements if movable(j))
        moves = 0
        for _neg, j in order:
            if budget is not None and budget.expired():
                break
            drop = own(j)
            saving = sum(self.p.running[v].cost for v in drop)
            if saving <= 0:
                continue
            info = self.p.pending[j]
            self.placing(info)
            old = placements[j]
            for k, (ni, m) in enumerate(old):  # out with the job and its own victims
                self.release(st, ni, m, drop if k == 0 else [])
            # the job's best distinct nodes now; a victim two of them share counts once
            best = self._best_nodes(st, info, info.job.nodes)
            new = sorted({v for _w, _left, _ni, vs in best for v in vs})
            if (len(best) < info.job.nodes
                    or sum(self.p.running[v].cost for v in new) >= saving - 1e-6
                    or (len(best) > 1 and new and not self.within_limits(st, new))):
                self.evict(st, drop)  # put the job and its victims back as they were
                for ni, m in old:
                    self.occupy(st, ni, m)
                continue
            self.evict(st, new)
            parts = sorted((ni, self.take_gpus(st, info, ni)) for _w, _left, ni, _vs in best)
            use.unlink(j)
            use.link(j, parts, st.victims)
            placements[j] = parts
            moves += 1
        # a new victim whose GPUs the job did not take in the end has no beneficiary
        return clean(self.p, Decision(set(st.victims), placements)), moves
