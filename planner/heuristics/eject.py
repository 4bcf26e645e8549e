"""Ejection: admit a deferred job by moving a placed one (docs/planner.md 2b).

The greedy planner places one job at a time and never revisits a choice, and
LNS re-solves one part of the cluster at a time. Both miss moves that need two
jobs to change places: a placed job ``K`` that could run elsewhere holds the only
GPUs a deferred job ``J`` can use. Typical cases: ``K`` does not need NVLink (or a
GPU type) and sits on one of the few nodes with the 8-GPU NVLink fabric (or the
type) that ``J`` needs; or ``K``'s victims use the storm budget of the storage
target that ``J``'s victims would flush to.

:func:`eject` takes the tiers in turn, most important first. For tier ``t`` it
starts from the plan's jobs of tiers up to ``t`` (the less important ones out, with
the victims only they used), and takes each deferred job ``J`` of tier ``t`` in the
greedy planner's order, twice (the first sweep makes only the first two moves below,
which are quick, and single-node jobs make them before gangs; the second sweep the
third move, slower for gangs):

* ``J`` is placed at once if it now fits;
* otherwise, when the storm limit (R11/R12) refused some of ``J``'s options, on each
  storage target that refused one: the placed jobs using the victim that sets the
  target's tightest cap (its large barrier or slow local disk leaves the others
  little room) leave, with the victims only they used, and are placed again
  without that victim; ``J`` is placed if it now fits, else the move is undone
  ("storm relief");
* otherwise each placed job ``K`` that holds GPUs on one of ``J``'s candidate
  nodes, without which ``J`` would fit there, is tried in turn (less important
  tiers, then smaller jobs, first; at most ``GANG_BLOCKERS`` for a gang): ``K``
  leaves, with the victims only it used (their flushes leave the storm loads,
  R11/R12, and the eviction budgets, R13), ``J`` is placed, and ``K`` is placed
  again. The move is kept when ``K`` finds a place, or when deferring ``K`` still
  raises tier ``t``'s admitted GPUs (``K`` of tier ``t`` and smaller than ``J``);
  otherwise it is undone, and until a move changes the plan no placed job of
  ``K``'s shape is tried again for a job of ``J``'s shape: it would find no place
  again either, as a rule (``SKIP_UNMOVED``; on the 1,024-node benchmark tick
  seven in ten of these tries repeated such a pair, and none of the moves that
  worked did). Nor is a ``K`` whose leaving could not give a single-node ``J`` room
  on its node: ``J`` may evict no victim then, and the GPUs ``K`` frees there, less
  those of the victims only ``K`` used (held by them again), leave ``J`` without
  a fit (``SKIP_HOPELESS``).

A third sweep takes the gangs still deferred that keep one block or NVLink domain
("clearing"): of the groups of ``J``'s candidate nodes where ``J`` would fit with
every placed job there gone, the one with the fewest such jobs; they leave, ``J`` is
placed, and they are placed again, largest first. The move is kept when every one
finds a place, else undone. (Gangs free to use any nodes can each take a node or
two of the only block such a gang could use; moving one of them frees no block.)

A fourth sweep makes chains of two moves, single-node jobs first: ``K`` leaves and
``J`` is placed, but ``K`` finds no place; then each placed job ``K2`` that blocks
``K`` is tried: ``K2`` leaves, ``K`` is placed, and ``K2`` is placed again. The move
is kept when ``K2`` finds a place, else undone (and ``K2`` is not tried again for
``J``). Most tries find nothing and each places jobs twice, so the first chain
found ends the sweep, and with a wall clock a sweep gets at most CHAIN_SHARE of the
time left (the less important tiers' quicker moves come after it). Where plans are
compared after ``thrash.exempt_free_first`` and that trade would undo some of the
tier's new jobs while the tier still admits more than before the round, the chains
wait for the next round, which starts from the plan after the trade.

Then the less important tiers' jobs come back: where they were, when their GPUs
are still available to them within the limits, else where the greedy search puts
them now, else deferred. Tier ``t`` admits more GPUs and the more important tiers
as many, so the plan ranks above the one before (objective item 1 ranks the tiers
first), and it is kept (checked). A shape of job that found no move is not tried
again until a move changes the plan. A round over the tiers that admitted more is
followed by another.

Every placement comes from the greedy search or is checked like one: candidate
nodes, rights (R7, R10), NVLink (R3), gangs (R2), the storm limit and the
budgets; ``plan()`` verifies the result. A wall-clock budget (``Budget``), or in
deterministic mode a number of tried moves, bounds the work.
"""

from __future__ import annotations

import math

from models.rules import keeps_group
from planner.core import topology as topo
from planner.core.budget import Budget
from planner.core.decision import Decision, after_trade, clean, objective_of
from planner.core.problem import PendingInfo, Problem
from planner.heuristics.greedy import GreedyPlanner, VictimUse, job_order

# a one-job move skips a placed job whose shape found no place again for the deferred
# job's shape since the plan last changed (_Ejector.unmoved; benchmarks and tests
# compare without it)
SKIP_UNMOVED = True
# a one-job move skips a placed job whose leaving could not give a single-node job
# room on its node (_Ejector._hopeless; benchmarks and tests compare without it)
SKIP_HOPELESS = True
GANG_BLOCKERS = 8  # placed jobs tried per deferred gang
# a tier's chain sweep gets at most this share of a wall-clock budget's time left:
# most of its tries find nothing (on the 1,024-node benchmark tick after the trade of
# thrash.exempt_free_first, every sweep of a 4.7 s ejection found nothing, 2.7 s in
# all), and the less important tiers' quicker moves come after it in the round
CHAIN_SHARE = 1 / 3
# time to set up the greedy planner's state for a plan (an _Ejector), per running job,
# on the benchmark machine (upgrade's ``speed`` scales it to this one): 0.05 s at 2,730
# running jobs, 0.26 s at 11,464 (1,024 and 4,096 benchmark nodes)
SETUP_S_PER_RUNNING = 2.5e-5


def eject(problem: Problem, d: Decision, budget: Budget | None = None, *,
          tries: int | None = None, traded: bool = False) -> tuple[Decision, int]:
    """A copy of ``d`` improved by ejection moves (see the module docstring), and the
    number of jobs it admits that ``d`` deferred. Stops at the end of ``budget``
    or after ``tries`` tried moves (deterministic); the
    plan is never worse than ``d``. With ``traded``, plans are compared, and kept,
    after ``thrash.exempt_free_first`` (planner/core/decision.py), so the plan is never
    worse than ``d`` after that trade, which may itself rank below ``d``: a round's plan in
    which exempt jobs then take the free GPUs a newly admitted job holds ranks as
    it does after that trade (the planner that returns plans after the trade,
    planner/solver/cpsat.py, would otherwise keep moves the trade undoes)."""
    if _past(budget):
        return d, 0
    order = job_order(problem)
    admitted = 0
    tries_left = [math.inf if tries is None else tries]  # moves left to try, shared
    # rounds over the tiers while one admits more (a chain found ends its tier's
    # sweep: the next round goes on)
    while True:
        d, n = _round(problem, d, order, budget, tries_left, traded)
        admitted += n
        if not n or _late(tries_left, budget):
            return d, admitted


def _round(problem: Problem, d: Decision, order: list[PendingInfo], budget: Budget | None,
           tries_left: list[float], trade: bool) -> tuple[Decision, int]:
    """One round of :func:`eject` over the tiers, most important first: the improved
    plan and the number of jobs it admits that ``d`` deferred."""
    if trade:
        d = after_trade(problem, d)[0]
    key = objective_of(problem, d).key()
    admitted = 0
    for tier in sorted({i.job.tier for i in order}):
        todo = [i for i in order if i.job.tier == tier and i.job.id not in d.placements
                and i.candidates]
        if not todo or _late(tries_left, budget):
            continue
        # the tier and the more important ones, as if the less important were not placed
        ej = _Ejector(problem, clean(problem, Decision(set(d.victims), {
            j: p for j, p in d.placements.items() if problem.pending[j].job.tier <= tier})),
            tries_left)
        # the quick moves for every job first (placed at once, or by a storm relief),
        # single-node jobs before gangs: their tries are cheap (one node's options,
        # memoised per shape) and most quick moves are theirs, while a gang's try
        # searches every candidate node (a short budget would otherwise go to the
        # gangs' tries; docs/planner.md, section 2b). Then the moves of one placed job
        n = sum(ej.admit(i, budget, move=False)
                for i in sorted(todo, key=lambda i: i.job.nodes > 1))
        n += sum(ej.admit(i, budget) for i in todo if i.job.id not in ej.placements)
        # then, for gangs that keep one block or NVLink domain, the clearing of one
        n += sum(ej.clear(i, budget) for i in todo)
        # last, chains of two moves, single-node jobs first. They are slow, and most
        # tries find nothing: the first chain found ends the sweep, and with a wall
        # clock the sweep keeps to CHAIN_SHARE of the time left, so that the less
        # important tiers get their moves in this round too (the next round goes on).
        # None where the trade would undo some of the tier's new jobs while the tier
        # still gains: the next round, from the plan after the trade, comes sooner
        within = None if budget is None else budget.share(CHAIN_SHARE)  # (as is without a clock)
        if not (trade and n and _undone(problem, ej, tier, d)):
            n += any(ej.chain(i, within) for i in sorted(todo, key=lambda i: i.job.nodes > 1))
        if not n:
            continue
        # the less important tiers back where they were when that still fits (a quick
        # test), then the others where the greedy search puts them now, while time
        # lasts. (When it runs out, the plan without the rest still ranks above d: its
        # tier admits more, and the more important tiers as much.)
        rest = []
        for i in order:
            if i.job.tier > tier and i.candidates:
                old = d.placements.get(i.job.id)
                if not (old and ej.restore(i, old)):
                    rest.append(i)
        for i in rest:
            if _past(budget):  # (not bounded by the tries: these are not moves)
                break
            ej.place(i)
        out = ej.decision()
        if trade:
            out = after_trade(problem, out)[0]
            n = sum(1 for j in out.placements if j not in d.placements
                    and problem.pending[j].job.tier == tier)
        k = objective_of(problem, out).key()
        if k > key:
            d, key, admitted = out, k, admitted + n
    return d, admitted


def _undone(problem: Problem, ej: _Ejector, tier: int, d: Decision) -> bool:
    """Would ``thrash.exempt_free_first`` undo some of the tier's jobs in ``ej``'s plan
    (exempt jobs of a more important tier take the free GPUs they hold), the tier
    still admitting more GPUs than in ``d``, the round's plan? (The round's plan then
    ranks higher, and the next round starts from it after the trade.)"""
    base = ej.decision()
    traded, moved = after_trade(problem, base)
    if not moved:
        return False
    pending = problem.pending
    if not any(pending[j].job.tier == tier and j not in traded.placements
               for j in base.placements):
        return False
    def gpus(x: Decision) -> int:
        return sum(pending[j].job.total_gpus for j in x.placements if pending[j].job.tier == tier)
    return gpus(traded) > gpus(d)


def upgrade(problem: Problem, d: Decision, budget: Budget | None = None, *,
            tries: int | None = None, speed: float = 1.0) -> tuple[Decision, int]:
    """Swaps for the priority value (objective item 3): a copy of ``d`` in which
    placed jobs have left for more important deferred jobs of their tier, and the
    number of such swaps.

    Placed jobs are taken least important first. For each, when its tier's deferred
    jobs of higher priority and at most its size could use as many GPUs: it leaves,
    with the victims only it used, and they are placed by the greedy search, most
    important first, skipping any that would overshoot its GPUs. The swap is kept
    when they use exactly its GPUs' number, for a higher priority value; else it is
    undone. Unlike repacking (planner/heuristics/repack.py), which refills exactly the GPUs
    the job held and keeps the victims, they may go anywhere and evict what they
    may: the tier's GPUs stay the same and item 3 grows, so the plan ranks higher
    whatever the cost (item 4). For example, an LNS round can place an 8-node gang
    of priority 11 whose 64 GPUs eight single-node jobs of priority 13-79 could use,
    one of them only on an H200 node that another job holds: no exact refill
    (section 2a). Starts only when ``budget`` leaves the
    time to set up the search (``SETUP_S_PER_RUNNING`` per running job, times
    ``speed``: this machine's time for the same work relative to the benchmark
    machine's, planner/solver/speed.py), and stops at it or after ``tries`` tried
    swaps and moves (deterministic)."""
    if budget is not None and not budget.fits(speed * SETUP_S_PER_RUNNING
                                              * len(problem.running)):
        return d, 0  # (no time to set up the search, let alone to swap)
    pend = problem.pending
    tries_left = [math.inf if tries is None else tries]
    deferred: dict[int, list[PendingInfo]] = {}
    for i in job_order(problem):
        if i.job.id not in d.placements and i.candidates:
            deferred.setdefault(i.job.tier, []).append(i)
    for infos in deferred.values():
        infos.sort(key=lambda i: (-i.job.priority, -i.job.total_gpus, i.job.id))
    ej = None
    swaps = 0
    for k in sorted(d.placements, key=lambda j: (pend[j].job.priority,
                                                 -pend[j].job.total_gpus, j)):
        if _late(tries_left, budget):
            break
        kjob = pend[k].job
        size = kjob.total_gpus
        queue = []
        for i in deferred.get(kjob.tier, ()):  # most important first
            if i.job.priority <= kjob.priority:
                break
            if i.job.total_gpus <= size and (ej is None or i.job.id not in ej.placements):
                queue.append(i)
        if sum(i.job.total_gpus for i in queue) < size:
            continue  # they could not use as many GPUs
        if ej is None:
            ej = _Ejector(problem, d, tries_left)
            if _late(tries_left, budget):
                break
        if k not in ej.placements:
            continue  # (left in an earlier swap)
        tries_left[0] -= 1
        ops = [ej._leave(k)]
        got = 0
        value: float = 0
        for i in queue:
            if got + i.job.total_gpus > size:
                continue
            more = ej._place_moving(i, budget)
            if more is not None:
                ops += more
                got += i.job.total_gpus
                value += i.job.priority * i.job.total_gpus
                if got == size:
                    break
        if got == size and value > kjob.priority * size:
            swaps += 1
        else:
            ej._undo(ops)
    if not swaps or ej is None:
        return d, 0
    out = ej.decision()
    if objective_of(problem, out).key() <= objective_of(problem, d).key():
        return d, 0  # (never: the tiers' GPUs are the same and item 3 grew)
    return out, swaps


def _past(budget: Budget | None) -> bool:
    return budget is not None and budget.expired()


def _late(tries_left: list[float], budget: Budget | None) -> bool:
    """Out of tries (deterministic mode) or past the budget's end?"""
    return tries_left[0] <= 0 or _past(budget)


def _shape(info: PendingInfo) -> tuple:
    """What a job's moves depend on: jobs of one shape find the same moves."""
    job = info.job
    return (job.tier, info.rights, job.gpus_per_node, info.need_nvlink, id(info.candidates),
            job.nodes, job.same_block, job.same_nvlink_domain)


class _Ejector:
    """One tier's pass: the greedy planner's state for plan ``d``, the plan's
    placements, and who uses which victim, kept in step through moves and undos."""

    def __init__(self, problem: Problem, d: Decision, tries_left: list[float]):
        self.p = problem
        self.tries_left = tries_left  # [moves left to try], shared by the tiers' passes
        self.g = GreedyPlanner(problem)
        self.st = self.g.state_of(d)
        self.placements = dict(d.placements)
        self.use = VictimUse(problem.owner)  # who uses which victim
        self.on: dict[int, set[str]] = {}  # node -> placed jobs with a shard there
        # a job shape that found no move stays without one until the plan changes:
        # shape -> number of moves made when it failed
        self.failed: dict[tuple, int] = {}
        self.moves = 0
        self.tried: dict[str, int] = {}  # job -> moves made when it last found no place
        self.relieved: dict[tuple, int] = {}  # (shape, storage) -> the same, for reliefs
        self.unchained: dict[tuple, int] = {}  # shape -> the same, for chains
        # (shape of J, shape of K) -> moves made when a placed job K of that shape,
        # which left for a deferred job J of that shape, found no place again
        self.unmoved: dict[tuple, int] = {}
        for j, parts in self.placements.items():
            self._link(j, parts, True)

    # -- bookkeeping ----------------------------------------------------------------
    def _link(self, j: str, parts: list[tuple[int, int]], add: bool) -> set[str]:
        """Job j holds (add) or gives back ``parts``; the victims it used (leaving)."""
        vs: set[str] = set()
        if add:
            self.use.link(j, parts, self.st.victims)
            self._exempt_again(self.use.uses.get(j, set()))
        else:
            vs = self.use.unlink(j)
        for ni, _m in parts:
            if add:
                self.on.setdefault(ni, set()).add(j)
            else:
                self.on[ni].discard(j)
        return vs

    def _out(self, j: str, parts: list[tuple[int, int]], drop: list[str]) -> None:
        """Give back a job's GPUs and un-evict ``drop`` (victims no one else uses)."""
        for x, (ni, m) in enumerate(parts):
            self.g.release(self.st, ni, m, drop if x == 0 else [])

    def _leave(self, k: str) -> tuple:
        """Take placed job k out, with the victims only it used; an undo record."""
        parts = self.placements.pop(k)
        used = self._link(k, parts, False)
        drop = self.use.unused(used)
        self._out(k, parts, drop)
        self._exempt_again(used - set(drop))
        return ("left", k, parts, drop)

    def _exempt_again(self, vs: set[str]) -> None:
        """R15: whether victims whose users changed are exempt (by their users' tiers)."""
        tb = self.p.thrash
        if tb is None:
            return
        for v in vs:
            if tb.exempt_by(self.p.pending[j].job.tier for j in self.use.users.get(v, ())):
                self.st.exempt.add(v)
            else:
                self.st.exempt.discard(v)

    def _place(self, info: PendingInfo) -> tuple | None:
        """Place a job by the greedy search; an undo record, or None."""
        before = set(self.st.victims)
        parts = self.g.place(self.st, info)
        if parts is None:
            return None
        self.placements[info.job.id] = parts
        self._link(info.job.id, parts, True)
        return ("placed", info.job.id, parts, sorted(self.st.victims - before))

    def _undo(self, ops: list[tuple]) -> None:
        for op in reversed(ops):
            kind, j, parts, victims = op
            if kind == "placed":  # out again, with the victims it evicted
                del self.placements[j]
                self._link(j, parts, False)
                self._out(j, parts, self.use.unused(victims))
            else:  # back in, with its victims
                self.g.placing(self.p.pending[j])
                self.g.evict(self.st, victims)
                for ni, m in parts:
                    self.g.occupy(self.st, ni, m)
                self.placements[j] = parts
                self._link(j, parts, True)

    def _held(self, k: str, ni: int) -> int:
        """The GPUs placed job k holds on node ni (one of its nodes)."""
        return next(m for n2, m in self.placements[k] if n2 == ni)

    # -- moves ----------------------------------------------------------------------
    def _blockers(self, info: PendingInfo, *, whole: bool = False) -> list[tuple[str, int]]:
        """(placed job, node): placed jobs without whose GPUs on one of the job's
        candidate nodes it would fit there, less important tiers first, then smaller
        jobs first. With ``whole``, for a gang, only those whose leaving leaves it as
        many nodes as it needs where it could fit, evicting what it may, in one group
        (block or NVLink domain, when it keeps one): necessary, not sufficient (the
        storm limit and the budgets may still refuse)."""
        g, gpn, need = self.g, info.job.gpus_per_node, info.need_nvlink
        whole = whole and info.job.nodes > 1
        found: dict[str, int] = {}
        # (with whole) per group: nodes that could host a shard, evicting what it may;
        # and job -> group -> the nodes its leaving adds
        hosts: dict[tuple, int] = {}
        freed: dict[str, dict[tuple, int]] = {}
        for ni in info.candidates:
            here = self.on.get(ni)
            if not (here or whole):
                continue
            avail = g.available(self.st, info, ni)
            layout = self.p.nodes[ni].layout
            for k in here or ():
                if k not in found and topo.layout_fits(layout, avail | self._held(k, ni),
                                                       gpn, need):
                    found[k] = ni
            if whole:
                group = g.group_key(info, ni)
                for v in g.allowed_victims(self.st, info, ni):
                    avail |= g.vmask[(v, ni)]
                if topo.layout_fits(layout, avail, gpn, need):
                    hosts[group] = hosts.get(group, 0) + 1
                    continue
                for k in here or ():
                    if topo.layout_fits(layout, avail | self._held(k, ni), gpn, need):
                        per = freed.setdefault(k, {})
                        per[group] = per.get(group, 0) + 1
        if whole:
            found = {k: ni for k, ni in found.items()
                     if any(hosts.get(gr, 0) + n >= info.job.nodes
                            for gr, n in freed.get(k, {}).items())}
        pend = self.p.pending
        return sorted(found.items(),
                      key=lambda kn: (-pend[kn[0]].job.tier, pend[kn[0]].job.total_gpus, kn[0]))

    def admit(self, info: PendingInfo, budget: Budget | None, *, move: bool = True) -> bool:
        """Place a deferred job at once, by a storm relief, or (``move``) by moving one
        placed job (see the module docstring); whether it was placed."""
        job = info.job
        shape = _shape(info)
        if self.failed.get(shape) == self.moves or _late(self.tries_left, budget):
            return False
        if self.tried.get(job.id) != self.moves:  # (the plan changed since it was tried)
            self.g.full_storages = set()
            if self._place(info) is not None:
                self.moves += 1
                return True
            if self.g.full_storages and self._relieve(info, shape, self.g.full_storages,
                                                      budget):
                return True
            self.tried[job.id] = self.moves
        if not move:
            return False
        blockers = self._blockers(info)
        if job.nodes > 1:
            # a gang seldom fits by moving one job, and each try searches every
            # candidate node: only the first few (see docs/planner.md 2b)
            blockers = blockers[:GANG_BLOCKERS]
        if self._move_one(info, blockers, budget, may_defer=True) is not None:
            self.moves += 1
            return True
        self.failed[shape] = self.moves
        return False

    def _move_one(self, info: PendingInfo, blockers: list[tuple[str, int]],
                  budget: Budget | None, *, may_defer: bool = False,
                  remember: bool = True) -> list[tuple] | None:
        """The one-job move: each placed job ``k`` of ``blockers`` in turn leaves, the
        job is placed, and ``k`` is placed again; with ``may_defer``, ``k`` may stay
        deferred when that still raises the job's tier's GPUs (``k`` of its tier and
        smaller). With ``remember`` (where the plan changes only by moves, which
        ``self.moves`` counts), a ``k`` whose shape found no place again for a job
        of this one's shape, since the plan last changed, is skipped
        (``SKIP_UNMOVED``; it counts as a tried move, so that deterministic runs
        make the moves they made without the skip wherever the skipped move would
        not have worked). The undo records of the first that works, or None."""
        job = info.job
        shape = _shape(info)
        for k, ni in blockers:
            if _late(self.tries_left, budget):
                return None
            self.tries_left[0] -= 1
            kinfo = self.p.pending[k]
            pair = (shape, _shape(kinfo))
            if remember and SKIP_UNMOVED and self.unmoved.get(pair) == self.moves:
                continue  # (counted as a try: deterministic runs stay as they were)
            if SKIP_HOPELESS and self._hopeless(info, k, ni):
                continue  # (the same)
            ops = self._instead(info, k, ni)
            if ops is None:
                continue
            back = self._place(kinfo)
            if back is not None:
                return ops + [back]
            if may_defer and kinfo.job.tier == job.tier and kinfo.job.total_gpus < job.total_gpus:
                return ops
            self._undo(ops)  # (k deferred would cost its tier, or the job's, GPUs)
            if remember:
                self.unmoved[pair] = self.moves
        return None

    def _hopeless(self, info: PendingInfo, k: str, ni: int) -> bool:
        """Would the single-node job find no option on node ni with placed job k gone
        (the quick test of :meth:`_instead`, without making the move)? So where it
        may evict no victim then (no rights, or the budgets, R13 and R15, closed
        even without the victims only k used: a tier that is not exempt) and does
        not fit the GPUs available to it now together with k's there, less those of
        the victims only k used (evicted no more once k leaves)."""
        job = info.job
        if job.nodes > 1 or self.p.exempt(job.tier):
            return False
        g, running = self.g, self.p.running
        own = self.use.own(k)
        if info.rights and not g.closed_without(
                self.st, len(own), sum(running[v].job.total_gpus for v in own)):
            return False
        back = 0  # (GPUs of the victims only k used, held by them again)
        for v in own:
            back |= g.vmask.get((v, ni), 0)
        return not g.fits(ni, g.available(self.st, info, ni) | (self._held(k, ni) & ~back),
                          info)

    def _instead(self, info: PendingInfo, k: str, ni: int) -> list[tuple] | None:
        """Placed job k, which blocks the job on node ni, leaves and the job is placed:
        the undo records, or None (undone) when the job still finds no place."""
        ops = [self._leave(k)]
        if info.job.nodes == 1 and self.g.node_option(self.st, info, ni) is None:
            self._undo(ops)  # (a quick test: not even where k was)
            return None
        placed = self._place(info)
        if placed is None:
            self._undo(ops)
            return None
        return ops + [placed]

    def _place_moving(self, info: PendingInfo, budget: Budget | None) -> list[tuple] | None:
        """Place a job by the greedy search, or else by moving one of the first
        ``GANG_BLOCKERS`` placed jobs that block it elsewhere (a one-job move): the
        undo records, or None. (Priority swaps change the plan between such calls
        without counting moves: no skip by ``unmoved`` here.)"""
        op = self._place(info)
        if op is not None:
            return [op]
        return self._move_one(info, self._blockers(info)[:GANG_BLOCKERS], budget,
                              remember=False)

    def chain(self, info: PendingInfo, budget: Budget | None) -> bool:
        """The fourth sweep's move, a chain of two: a placed job ``K`` that blocks the
        deferred job ``J`` leaves and ``J`` is placed (as in the one-job move), but
        ``K`` finds no place; then each placed job ``K2`` that blocks ``K`` is tried:
        ``K2`` leaves, ``K`` is placed, and ``K2`` is placed again. The move is kept
        when ``K2`` finds a place, else undone; a ``K2`` that found no place is not
        tried again for another ``K`` (the plan differs only by ``K`` and ``J``).
        Whether ``J`` was placed."""
        job = info.job
        shape = _shape(info)
        if (job.id in self.placements or self.unchained.get(shape) == self.moves
                or _late(self.tries_left, budget)):
            return False
        pend = self.p.pending
        stuck: set[str] = set()  # jobs K2 that found no place again, for an earlier K
        for k, ni in self._blockers(info, whole=True):
            if _late(self.tries_left, budget):
                return False
            kinfo = pend[k]
            ops = self._instead(info, k, ni)
            if ops is None:
                continue
            for k2, _n2 in self._blockers(kinfo, whole=True):
                if k2 == job.id or k2 in stuck:
                    continue
                if _late(self.tries_left, budget):
                    self._undo(ops)
                    return False
                self.tries_left[0] -= 1
                more = [self._leave(k2)]
                if self._place_all([k, k2], more):
                    self.moves += 1
                    return True
                if len(more) == 2:  # (k placed, k2 not)
                    stuck.add(k2)
                self._undo(more)
            self._undo(ops)
        self.unchained[shape] = self.moves
        return False

    def clear(self, info: PendingInfo, budget: Budget | None) -> bool:
        """For a deferred gang that keeps one block or NVLink domain, the third sweep's
        move (see :meth:`_clear_group`); whether it was placed."""
        if (info.job.id in self.placements or not keeps_group(info.job)
                or _late(self.tries_left, budget)):
            return False
        return self._clear_group(info)

    def _clear_group(self, info: PendingInfo) -> bool:
        """Place a gang that keeps one block or NVLink domain by clearing one: the
        group (of its candidate nodes) where it would fit with every placed job there
        gone, and the fewest such jobs, is chosen; those jobs leave, the gang is
        placed, and they are placed again. The move is kept when every one finds a
        place, else undone. (Gangs free to use any nodes can take nodes of the only
        block a gang that keeps one could use, a few each: no one of them frees it.)
        Whether the gang was placed."""
        g, st, p = self.g, self.st, self.p
        groups = p.gang_groups(info)[1]
        best = None
        for key, nis in groups.items():
            fit, movers = 0, set()
            for ni in nis:
                avail = g.available(st, info, ni)
                for k in self.on.get(ni, ()):
                    movers.add(k)
                    avail |= self._held(k, ni)
                for v in g.allowed_victims(st, info, ni):
                    avail |= g.vmask[(v, ni)]
                fit += topo.layout_fits(p.nodes[ni].layout, avail, info.job.gpus_per_node,
                                        info.need_nvlink)
            if fit >= info.job.nodes and movers:
                rank = (len(movers), sum(p.pending[k].job.total_gpus for k in movers), str(key))
                if best is None or rank < best[0]:
                    best = (rank, movers)
        if best is None:
            return False
        self.tries_left[0] -= 1
        leaving = sorted(best[1], key=lambda k: (-p.pending[k].job.total_gpus, k))
        ops = [self._leave(k) for k in leaving]
        placed = self._place(info)
        if placed is not None:
            ops.append(placed)
            if self._place_all(leaving, ops):
                self.moves += 1
                return True
        self._undo(ops)
        return False

    def _relieve(self, info: PendingInfo, shape: tuple, storages: set[str],
                 budget: Budget | None) -> bool:
        """Place a job that the storm limit kept out (R11/R12): for a storage target
        that refused one of its options, the placed jobs that use the victim setting
        the target's tightest cap leave, with the victims only they used, and are
        placed again without that victim; the job is placed if it now fits, else the
        move is undone. Whether it was placed. (A relief that failed for a job shape
        is not tried for it again until a move changes the plan.)"""
        g, st, running = self.g, self.st, self.p.running
        for s in sorted(storages):
            if _late(self.tries_left, budget):
                return False
            if self.relieved.get((shape, s)) == self.moves:
                continue
            flushing = [v for v in st.victims if running[v].storage == s and running[v].flushing]
            if not flushing:
                continue
            v = min(flushing, key=lambda v: (running[v].storm_cap_gb, v))
            users = sorted(self.use.users.get(v, ()))
            if not users:
                continue
            self.tries_left[0] -= 1
            ops = [self._leave(k) for k in users]
            g.ban(st, {v})
            back = self._place_all(users, ops)
            g.ban(st, set())
            placed = self._place(info) if back else None
            if placed is not None:
                self.moves += 1
                return True
            self._undo(ops)
            self.relieved[(shape, s)] = self.moves
        return False

    def _place_all(self, jobs: list[str], ops: list[tuple]) -> bool:
        """Place jobs again by the greedy search, in turn, adding their undo records to
        ``ops``; whether every one found a place (the first that did not stops it)."""
        for k in jobs:
            op = self._place(self.p.pending[k])
            if op is None:
                return False
            ops.append(op)
        return True

    def place(self, info: PendingInfo) -> bool:
        """Place a job where the greedy search puts it now; whether it fits."""
        return self._place(info) is not None

    def restore(self, info: PendingInfo, parts: list[tuple[int, int]]) -> bool:
        """Place a job exactly on ``parts`` (its GPUs in an earlier plan) when they are
        still available to it: free, freed by victims its tier may preempt, or held
        by running jobs it may evict within the storm limit and the budgets."""
        g, st, running = self.g, self.st, self.p.running
        g.placing(info)
        need: set[str] = set()
        for ni, m in parts:
            avail = g.available(st, info, ni)
            rest = m & ~avail
            held = 0  # (a GPU of rest no running job holds: not available)
            for v, part in self.p.owner.on(ni, rest):
                if (v in st.victims or not running[v].evictable
                        or running[v].job.tier not in info.rights):
                    return False
                need.add(v)
                held |= part
            if held != rest:
                return False
        new = sorted(need)
        if new and not g.within_limits(st, new):
            return False
        g.evict(st, new)
        for ni, m in parts:
            g.occupy(st, ni, m)
        self.placements[info.job.id] = parts
        self._link(info.job.id, parts, True)
        return True

    def decision(self) -> Decision:
        return clean(self.p, Decision(set(self.st.victims), self.placements))
