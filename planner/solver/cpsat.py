"""One planning tick: :func:`solve_cpsat`, a portfolio of strategies in one budget.

The strategies (planner/solver/portfolio.py) are the greedy variants and the baselines
(the hint and the fallback), polishing, ejection moves and priority swaps, a
second lane on another core, and then, as the budget allows, the whole CP-SAT model
(planner/solver/model.py) solved in lexicographic phases, or large-neighbourhood search
(planner/solver/lns.py). :meth:`_Run.schedule` picks what runs next, in what part of the
one :class:`~planner.core.budget.Budget`, from the plans so far and the costs
measured in this process; the loop in :func:`solve_cpsat` runs it and keeps the best
plan, which is assembled (planner/checks/assemble.py): never worse than the greedy
plans (docs/planner.md, sections 2-3).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from typing import Any

from models import Plan, SolverInfo
from planner.checks.assemble import assemble
from planner.core.budget import CUT_NOTE, Budget
from planner.core.decision import (
    Decision,
    after_trade,
    best_fit,
    carried,
    clean,
    exempt_free_first,
    first_come,
    moved_note,
    objective_of,
)
from planner.core.problem import Problem
from planner.core.reduce import Reduction, reduce_problem
from planner.heuristics.greedy import CutKeep, GreedyPlanner
from planner.solver.bound import (
    LEAST_ITEMS,
    TRADED_NOTE,
    BoundResult,
    item_values,
    relative_gap,
)
from planner.solver.lanes import available as lanes_available
from planner.solver.lanes import grace_s as lane_grace_s
from planner.solver.lns import NEIGHBOURHOOD_NODES, neighbourhoods
from planner.solver.model import min_solve_s
from planner.solver.packing import Packing, pack_gangs
from planner.solver.portfolio import (
    BASELINE_NAMES,
    CHEAPER_TIMES,
    EXACT_PAIRS,
    PRIORITY_FIRST,
    RATES,
    SQUEAKY_SHARE,
    STORM_PRICE,
    Baseline,
    BoundLane,
    Carried,
    Cheaper,
    Eject,
    FloorLane,
    Greedy,
    Lns,
    Pace,
    Polish,
    SecondLane,
    Squeaky,
    Strategy,
    WholeModel,
    also,
    eject_deadline,
    reserve_margin_s,
)
from planner.solver.speed import factor, records_factor, scaled

# least time left for neighbourhood rounds when the whole model is skipped, on the
# benchmark machine (lns_min_s(): on this one, planner/solver/speed.py)
LNS_MIN_S = 0.15
# the squeaky-wheel passes and a second lane run on clusters of more usable nodes than
# this many LNS neighbourhoods (planner/solver/lns.py): there a round sees a small part of
# the cluster, and re-runs that leave LNS most of its time often admit more
SQUEAKY_NEIGHBOURHOODS = 4
# the plain greedy plan is made in a second lane only where the tick searched has at
# least this many (pending job, candidate node) pairs: below, its run takes less than
# forking the child and waiting for it costs the parent (measured on 4,096 nodes:
# 1-6 ms for the 300-5,760 pairs of a loop's steady ticks, against some 0.06 s a
# tick with the lane; 32 ms at 185,551 pairs on 1,024 nodes, where the lane runs)
FLOOR_LANE_PAIRS = 100_000
# optional candidates (the storm variant without free sparing, the priority-first
# variant, and the baselines when no eviction budget bound) run when they take at most
# this share of the time left to improve the plan, and leave one whole LNS round
# (Rates.round_s) where LNS has rounds to run (docs/planner.md, section 2)
EXTRA_SHARE = 0.15
# the early lane's candidates, in order (_Run.early_lane)
EARLY_LANE: tuple[dict | str, ...] = ("k8s", "slurm", PRIORITY_FIRST)
# ejection moves (planner/heuristics/eject.py) on the plan to return: this share of the time
# left for LNS is kept for them (they also get what LNS leaves; docs/planner.md, 2b)
EJECT_SHARE = 0.1
# where a baseline's plan ranks first on a big cluster without the whole model,
# ejection moves first run on the best greedy variant's plan, in this share of their
# time: on the 4,096-node benchmark tick, 1 s of them admits 41-65 jobs from the
# sparing variants' plans (765 -> 997-1,093 tier-2 GPUs after the trade) and 7-8
# from the baselines' (801-805 -> 853)
EJECT_VARIANT_SHARE = 0.5
# ... and where the variant's plan, polished, ranks first, from that plan as it came
# where ejection has at least this long on the benchmark machine (scaled): on the
# clusters of bench_ab.py (2026-12-07, 24 clusters of 1,024-4,096 nodes at 1-3 s and
# 24 of 512-1,536 nodes with eviction budgets at 0.5-2 s, two runs each) with no
# such floor the former gained and the latter lost (tier-1 GPUs 482 -> 442 on a
# 768-node cluster at 0.5 s: the share taken from the moves on the polished plan)
VARIANT_EJECT_LEAST_S = 0.5
# the least time the first greedy plan's loop gets, on the benchmark machine, when the
# time to improve the plan is shorter or over (first_least_s(): on this one): where
# preprocessing, assembly and the checks take the whole time limit, the plan returns
# about this much after them, with the jobs the greedy run reached (README,
# time_limit_s)
FIRST_LEAST_S = 0.1
# a greedy search for a job on free GPUs alone takes this long, plus FREE_NODE_S per
# usable node, on the benchmark machine (free_quick_s(): on this one; measured inside
# the first greedy run: 126 us at 4,096 nodes, 144 us at 12,500, with a margin), a
# sixth to a seventh of a search that may evict (planner/heuristics/greedy.py,
# GreedyPlanner.solve)
FREE_JOB_S = 1.2e-4
FREE_NODE_S = 5e-9
# what a first greedy run cut short keeps for its plan's assembly and checks
# (greedy.CutKeep), on the benchmark machine: CUT_NODE_S per usable node, plus
# CUT_PLACED_S for each placed job, CUT_VICTIM_S for each victim (the trade of
# thrash.exempt_free_first, the storm and grace checks and the explanations go over
# the victims), and CUT_DEFERRED_S for each job searched and deferred (explained in
# full; a job not reached is explained in a line), times CUT_SAFETY. Fitted
# (non-negative least squares) to the time from the start of the plan's assembly
# (thrash.exempt_free_first, first_come, best_fit, assembly, the verifier, freeing)
# to its return, over the scaled least factor (CUT_LEAST_FACTOR): 2026-12-07, 28
# plans in fresh processes of 2,048-12,500 nodes at 0.3-3 s (23 of them cut), 0.08-0.56
# s with 458-2,571 placed jobs, 0-1,032 victims and 0-2,765 deferred jobs (speed
# factor 0.59); every plan's time within 1.07 x the keep with CUT_SAFETY, most
# 0.6-0.85 x. (The fit of 2026-12-05, 12 us per node and 0.16 ms per placed job or
# victim, was made before the explanations were worked out once per job shape: it
# kept 1.0-2.0 x what those plans took, 1.6 x at 12,500 nodes and 1 s.)
CUT_NODE_S = 1.1e-5
CUT_PLACED_S = 7.5e-5
CUT_VICTIM_S = 2.2e-4
CUT_DEFERRED_S = 5e-5
CUT_SAFETY = 1.25
# ... plus CUT_LINE_S (times CUT_SAFETY) for each job the problem's reduction deferred
# without a search (planner/core/reduce.py: none in the plans of that fit): its
# deferral, in a line, checked by the verifier and freed (bench_flood's 100,000 tasks
# on 256 nodes: 0.32 s of assembly and 0.08 s of verifier for 99,875 deferrals, speed
# factor 0.59, over CUT_LEAST_FACTOR)
CUT_LINE_S = 4.8e-6
# where no time is left to polish a whole first greedy plan, its repacking and moves
# to idle GPUs still run within this share of the budget, or LATE_POLISH_S on the
# benchmark machine if more (_Run.steps; relocation: 27 ms for 208 moves of the
# 4,096-node benchmark tick's sparing plan, 7 ms for a steady tick's plan there)
LATE_POLISH_SHARE = 0.03
LATE_POLISH_S = 0.03
# where the time left is too short for the packing of the first tier's gangs before
# the greedy plans, it runs after the first greedy run for its bound alone where the
# time left holds it, PACK_BOUND_NODE_S per usable node on the benchmark machine
# (_Run.late_pack; pack_gangs took 0.03 s at 12,500 nodes, speed factor 0.59-0.71)
PACK_BOUND_NODE_S = 4.5e-6
# the reserve fitted to the first whole greedy plan's size is this many times what
# reserve_keep() says a plan of that size needs (_Run._fit_reserve): RESERVE_NODE_S
# per usable node, RESERVE_PLACED_S per placed job and per victim, RESERVE_DEFERRED_S
# per deferred job, on the benchmark machine (the cut keep's fit of 2026-12-05; past the
# reserve a whole plan's tick also collects the lanes' plans, and measured at 11 ticks
# of 1,024-12,500 nodes this keep was 0.82-2.0 x what the reserve's work took:
# docs/planner.md, section 2)
RESERVE_FIT_TIMES = 1.25
RESERVE_NODE_S = 1.2e-5
RESERVE_PLACED_S = 1.6e-4
RESERVE_DEFERRED_S = 5e-5
# the least speed factor the cut keep is scaled by (cut_keep)
CUT_LEAST_FACTOR = 0.84
# best_fit (objective item 6) on the plan takes at most this share of the time limit
# in wall-clock mode: its gathering of tier-1 shards took 0.08 s at 4,096 nodes and
# 0.3 s at 12,500 (a greedy plan, every pass), 14 ms at 1,024; the cut keep was
# fitted when it took 11-19 ms at 12,500
BEST_FIT_SHARE = 0.02
# after the plan's assembly, the floor lane's bound is waited for while the time left
# holds this many times the assembly's time for the verifier and freeing what the
# tick built (bench_floor.py: 1.0-1.2 times the assembly at 4,096-12,500 nodes)
VERIFY_TIMES = 1.5
# each plan is kept after thrash.exempt_free_first (_Run.swapped) where one trade
# takes at most this share of the time limit, at TRADE_NODE_S per usable node on
# the benchmark machine (the trade of the benchmark ticks' sparing greedy plan took
# 4 ms at 1,024 nodes, 23-30 ms at 4,096 and 54-94 ms at 12,500, the machine's speed
# factor 1.4; a tick keeps some ten plans): up to about 3,600 usable nodes at 1 s,
# 7,300 at 2 s and 18,000 at 5 s on that machine, fewer on a slower one
SWAP_SHARE = 0.02
TRADE_NODE_S = 5.5e-6
# a greedy search for a job that may evict takes up to this many times one on free
# GPUs alone (FREE_JOB_S: a sixth to a seventh)
SEARCH_TIMES = 7
# where the reserve leaves the first greedy run time of its own, its jobs take free
# GPUs first (free_first) when SEARCH_TIMES x a free search per job is more than
# this many times the time it may run until its cut (job by job, most searches end
# sooner: at 4,096 nodes and 1 s the run often reaches every job; at 12,500 nodes
# the first search of each job shape scans every node, and job by job the run
# reached a fifth of the jobs in 2.5 s, 776-1,688 tier-2 GPUs against 2,414 free
# first in 2 s)
FREE_FIRST_TIMES = 4
# the plain greedy plan (the floor lane's) takes about this many times the jobs on
# free GPUs alone (free_quick_s() each): at 12,500 nodes 0.9-1.1 s against 0.49-0.7 s
# for 4,578 jobs. At 1 s there the jobs on free GPUs alone fit the limit left after
# the problem (0.66-0.71 s), the whole run does not: a floor lane forked there gave no
# plan in time and the first greedy run admitted 4,951-6,583 tier-1 GPUs (6,583 in 4
# runs of 6), 1,316-1,582 tier-2, the plans in 1.00-1.03 s; without it 6,583 in 5 of
# 6 (4,470 in the sixth, whose problem took 0.5 s), 1,506-2,041 tier-2, 0.93-0.97 s
FLOOR_RUN_TIMES = 2
# the first search for victims of a job shape takes up to this long per usable node,
# on the benchmark machine (first_search_s(): on this one): it builds the shape's
# heap over every candidate node (measured: 177 ms for an 8-node tier-1 gang, the
# first job of the 12,500-node benchmark tick, 25 ms or less for the next ones)
FIRST_SEARCH_NODE_S = 1.4e-5


def lns_min_s() -> float:
    """LNS_MIN_S on this machine (LNS runs only with a wall clock)."""
    return scaled(LNS_MIN_S)


def free_quick_s(usable: int) -> float:
    """A greedy search for a job on free GPUs alone, on ``usable`` nodes, on this
    machine (FREE_JOB_S, FREE_NODE_S)."""
    return scaled(FREE_JOB_S + FREE_NODE_S * usable)


def cut_keep(whole: Budget, usable: int, lines: int = 0) -> CutKeep:
    """What a first greedy run cut short keeps of ``whole``, on this machine, for a
    cluster of ``usable`` nodes and ``lines`` jobs deferred without a search
    (CUT_NODE_S and the others, times CUT_SAFETY), with the reserve's margin.
    Scaled by the speed factor, or what the plan's problem build said where that is
    higher (speed.records_factor: the work after the cut is of the build's kind),
    but by CUT_LEAST_FACTOR at least: on a
    quicker machine the work after the cut (assembly, the verifier, freeing) sped
    up less than the factor says (12,500 nodes at 1 s, speed factor 0.59: 0.37-0.43 s
    after the cut where the scaled fit kept about 0.27 s, and the plans took
    1.05-1.17 s; with the least factor 0.99-1.02 s)."""
    s = CUT_SAFETY
    return _keep(whole, usable, s * CUT_NODE_S, s * CUT_PLACED_S, s * CUT_DEFERRED_S,
                 s * CUT_VICTIM_S, s * CUT_LINE_S * lines)


def reserve_keep(whole: Budget, usable: int) -> CutKeep:
    """What a whole plan of a cluster of ``usable`` nodes needs of ``whole`` for its
    assembly and checks, before RESERVE_FIT_TIMES (_Run._fit_reserve): RESERVE_NODE_S
    and the others, scaled as :func:`cut_keep` is."""
    return _keep(whole, usable, RESERVE_NODE_S, RESERVE_PLACED_S, RESERVE_DEFERRED_S)


def _keep(whole: Budget, usable: int, node_s: float, placed_s: float, deferred_s: float,
          victim_s: float | None = None, lines_s: float = 0.0) -> CutKeep:
    """A CutKeep of ``whole`` with these parts on the benchmark machine (per usable
    node, placed job, deferred job and victim; None: victims count as placed jobs;
    ``lines_s`` for the jobs deferred without a search), scaled by
    speed.records_factor but CUT_LEAST_FACTOR at least, plus the reserve's margin."""
    f = max(CUT_LEAST_FACTOR, records_factor())
    return CutKeep(whole, f * (node_s * usable + lines_s) + reserve_margin_s(), f * placed_s,
                   f * deferred_s, None if victim_s is None else f * victim_s)


def first_search_s(usable: int) -> float:
    """What a first search for victims of a job shape may take on ``usable`` nodes,
    on this machine (FIRST_SEARCH_NODE_S)."""
    return scaled(FIRST_SEARCH_NODE_S * usable)


def first_least_s() -> float:
    """FIRST_LEAST_S on this machine (it bounds only a wall clock)."""
    return scaled(FIRST_LEAST_S)


def _more(missing: float) -> str:
    """How much more time the whole model needs, in words for solver.detail (an
    estimate: tenths of a second up to a minute, then minutes; a queue of hundreds
    of thousands of jobs would need days)."""
    if missing < 60:
        return f"about {max(missing, 0.1):.1f} s more"
    if missing < 3600:
        return f"about {missing / 60:.0f} min more"
    return "more than an hour more"


def _plan_name(s: Strategy | None) -> str:
    """A strategy's plan, in words for solver.detail."""
    if isinstance(s, Greedy | FloorLane) and not getattr(s, "settings", {}):
        return "the plain greedy plan (the greedy baseline's)"
    if isinstance(s, Baseline):
        return f"the {BASELINE_NAMES[s.name]} baseline's plan"
    if isinstance(s, Carried):
        return "the last tick's plan (nothing it rests on changed)"
    if isinstance(s, Greedy | Squeaky) or (isinstance(s, Eject) and s.origin is not None):
        return "a greedy variant's plan"
    if isinstance(s, WholeModel):
        return "the whole model's plan"
    return f"the plan of {s.name}" if s is not None and s.name else "another candidate plan"


def _reserve(problem: Problem, time_limit_s: float, deterministic: bool) -> float:
    """Time kept for extraction, assembly, explanations and the verifier (Rates)."""
    return RATES.reserve_s(problem, time_limit_s, deterministic)


def solve_cpsat(problem: Problem, *, time_limit_s: float = 1.0, deterministic: bool = False,
                workers: int = 2, seed: int = 0, log: bool = False, prune: bool = True,
                reduce: bool = True, last: tuple[Problem, Decision] | None = None) -> Plan:
    """Plan with CP-SAT and the heuristics around it, within ``time_limit_s`` (in
    deterministic mode a deterministic budget: no step looks at the clock, R14).
    ``prune=False`` keeps every candidate node however big the cluster (for
    reference solves with long budgets; the default prunes above EXACT_PAIRS job x
    node pairs, and the plan is then at most ``feasible``). The strategies search
    the tick without the jobs that cannot start (planner/core/reduce.py; not with
    ``reduce=False``); the plan is assembled and explained on the whole tick.
    ``last``: a loop's last tick (its problem and the decision of its plan), whose
    plan is a candidate where nothing it rests on changed (decision.carried)."""
    factor(deterministic)  # this machine's speed, measured before the budget starts (once)
    budget = Budget(time_limit_s, wall=not deterministic)  # (the reduction counts in it)
    # where the time left holds less than the reserve and the first greedy run's least
    # (_Run.candidates' tight), the reduction cuts the flooded kinds alone: that run
    # takes each tier's free GPUs first and is cut within the first tiers, and the
    # pass that finds the jobs that may only take free GPUs would be taken from it
    # (the 12,500-node benchmark tick at 1 s given the file, side by side, 2 x 3 plans:
    # 0.12-0.13 s past its floor against 0.17-0.23 s, 4,058-4,450 tier-1 GPUs against
    # 3,384-4,567; a flooded queue keeps its cut: bench_flood's 100,000 tasks at 1 s,
    # 177 tier-1 GPUs, where a search of every task admits 64)
    reserve = _reserve(problem, time_limit_s, deterministic)  # (of the whole tick)
    tight = not deterministic and time_limit_s - reserve < first_least_s()
    work, reduction = (reduce_problem(problem, narrow=not tight) if reduce
                       else (problem, Reduction()))
    run = _Run(work, budget, workers=workers, seed=seed, log=log, prune=prune,
               whole=problem, reduction=reduction, reserve=reserve,
               carried=carried(last[0], last[1], work) if last is not None else None)
    for strategy, budget in run.schedule():
        run.keep(strategy, strategy.run(work, budget))
    return run.plan()


class _Run:
    """One call of :func:`solve_cpsat`: the plans so far and what the schedule needs."""

    def __init__(self, problem: Problem, budget: Budget, *, workers: int, seed: int,
                 log: bool, prune: bool, whole: Problem | None = None,
                 reduction: Reduction | None = None, carried: Decision | None = None,
                 reserve: float | None = None):
        # problem: what the strategies search (the tick reduced); whole: the tick, for
        # the plan's assembly and explanations
        self.problem, self.budget = problem, budget
        self.whole = whole if whole is not None else problem
        self.reduction = reduction or Reduction()
        self.carried = carried  # the last tick's plan, still valid (a loop's)
        self.carried_note = ""  # said when it ranked above the greedy plan
        self.det = not budget.wall
        self.workers, self.seed, self.log, self.prune = workers, seed, log, prune
        # (the plan is assembled on the whole tick; ``reserve``: its _reserve(), worked
        # out already)
        self.reserve = (_reserve(self.whole, budget.seconds, self.det) if reserve is None
                        else reserve)
        self.work = budget.less(self.reserve)  # to improve the plan; then assembly, checks
        self.usable = sum(1 for n in problem.nodes if n.usable)
        self.pace = Pace(sum(len(i.candidates) for i in problem.pending.values()
                             if i.held_until is None), usable=self.usable)
        self.best: Decision | None = None  # the plan to return so far
        self.by: Strategy | None = None  # the strategy whose plan it is
        self.plans: list[Decision] = []  # every plan kept as a candidate (model pruning)
        self.plan_of: dict[int, Decision] = {}  # each strategy's plan, by id
        self._strategies: list[Strategy] = []  # the strategies that ran, in order
        self.second = ""  # said when the greedy plan comes from a squeaky-wheel pass
        self.computed: set[str] = set()  # the baselines whose plans were computed
        # the early lane's candidates, or the baselines the second lane runs alone
        self.in_lane: tuple[dict | str, ...] = ()
        self.lane: SecondLane | None = None
        self.floor: FloorLane | None = None  # the plain greedy plan's lane, when forked
        # a lane proving a bound where no second lane does (without_model), and its bound
        self.proving: BoundLane | None = None
        self.proof: BoundResult | None = None
        # the plain greedy plan's run here (plan() says where it was cut short)
        self.floor_run: Greedy | None = None
        self.spare: GreedyPlanner | None = None  # the first greedy run: what its limits refused
        self.greedy: Decision | None = None  # the best greedy plan, before polishing
        # the greedy variant or squeaky-wheel pass whose plan ranks first among theirs
        # (a start for ejection moves where a baseline's plan ranks higher:
        # without_model)
        self.variant_by: Greedy | Squeaky | None = None
        self.polish_s = 0.0  # the time its first polishing passes took
        self.end = self.work  # when passes before the last polishing pass end
        self._keys: dict[int, tuple[Decision, tuple]] = {}
        # thrash.exempt_free_first: each plan is kept after that trade (swapped()), so
        # that the passes after a candidate (polishing, ejection moves, LNS, the whole
        # model's hint) start from a plan that ranks as it will be returned; with a
        # wall clock only where a trade is expected to take at most SWAP_SHARE of the
        # time limit, else the best plan by the plain objective is traded at the
        # end, against every other plan traded too (_exempt_free_first)
        pol, tb = problem.policy.thrash, problem.thrash
        self.swapping = bool(pol is not None and pol.exempt_free_first and tb is not None
                             and tb.exempt_tiers)
        if self.swapping and not self.det:
            self.swapping = (TRADE_NODE_S * self.usable * scaled(1.0)
                             <= SWAP_SHARE * budget.seconds)
        self.moved: dict[int, tuple[Decision, int]] = {}
        self.traded: dict[int, Decision] = {}  # the plans swapped() returned
        self.raw_top: tuple = ()
        # for solver.detail
        self.why = ""  # why the whole model was skipped (and what LNS found)
        self.polished = ""  # the greedy plan's polishing
        self.cut = False  # was the first greedy run cut short (candidates)?
        self.lns: Lns | None = None  # LNS, when its plan was kept
        self.base_said = ""  # a baseline's plan won after LNS
        self.after = ""  # the passes on the plan to return
        self.model: WholeModel | None = None
        self.proven = False
        self.bound_info: tuple[float, float] | None = None
        # the plan kept places every pending job that may start on free GPUs (optimal)
        self.settled = False
        self.cost_bound: float | None = None
        self.more = ""  # the passes on the whole model's plan
        self.pre_ejected = ""  # ejection moves on the traded plan before the model
        self.variant_said = ""  # ejection moves on the best greedy variant's plan, kept
        self.variant_done = False  # ... they ran (before the whole model)
        self.packing = Packing()  # the first tier's gangs packed into groups (candidates)
        self.wall = 0.0

    # -- keeping the best -------------------------------------------------------

    def key(self, d: Decision) -> tuple:
        hit = self._keys.get(id(d))
        if hit is None or hit[0] is not d:
            hit = self._keys[id(d)] = (d, objective_of(self.problem, d).key())
        return hit[1]

    def swapped(self, s: Strategy, d: Decision) -> Decision:
        """``d``, the plan of ``s``, after ``thrash.exempt_free_first``
        (planner/core/decision.py) on it cleaned; ``d`` itself where no exempt job
        moves. ``moved`` counts the exempt jobs moved on the way to the plan (those
        moved in the plan a pass started from too), ``raw_top`` the plain objective's
        best key before any trade."""
        hit = self.traded.get(id(d))
        if hit is d:  # (a pass that returned the plan it started from)
            return d
        out, n = after_trade(self.problem, d)
        if n:
            self.raw_top = max(self.raw_top, self.key(d))
        start = getattr(s, "start", None)
        if isinstance(start, Decision) and id(start) in self.moved:
            n += self.moved[id(start)][1]
        if n:
            self.moved[id(out)] = (out, n)
        self.traded[id(out)] = out
        return out

    def keep(self, s: Strategy, d: Decision) -> None:
        """Keep ``d``, the plan of ``s``, as the best by the strategy's rule
        (portfolio.py: ``keeps``), and note it as the plan of ``s``. Where
        ``swapping``, ``d`` is kept after ``thrash.exempt_free_first`` (:meth:`swapped`),
        and a pass's plan only when it ranks at least as high as the plan it started
        from."""
        if self.swapping:
            d = self.swapped(s, d)
        self.plan_of[id(s)] = d
        self._strategies.append(s)
        if isinstance(s, Greedy | Squeaky) and (
                self.variant_by is None
                or self.key(d) > self.key(self.plan_of[id(self.variant_by)])):
            self.variant_by = s
        if s.keeps == "always":  # (a pass that never makes the plan worse...)
            if self.swapping and self.best is not None and (
                    self.key(d) < self.key(self.best)):
                return  # (...but may rank lower after the trade than the plan it started from)
            if s.said:
                self.plans.append(d)
            self.best = d
            self.settled = self.everything_free(d)
            return
        if s.keeps == "better":
            self.plans.append(d)
        if d is self.best:  # (the whole model's hint, returned: the plan is still its own)
            return
        if (self.best is None or self.key(d) > self.key(self.best)
                or (s.keeps == "as good" and self.key(d) >= self.key(self.best))):
            self.best, self.by = d, s
            if s.keeps == "better":
                self.second = s.second
            self.settled = self.everything_free(d)
            if isinstance(s, Carried):
                self.carried_note = ("the last tick's plan, still valid, ranked above the "
                                     "greedy plan: the search went on from it")

    def everything_free(self, d: Decision) -> bool:
        """Does ``d`` place every pending job that may start (not held by R9, with a
        candidate node) without a victim, where the whole model is out of reach? Then
        no plan admits more, costs less or evicts fewer: it is optimal (items 1-5),
        and the tick ends with it (a tick on a big cluster with room; docs/planner.md,
        section 2). Where the whole model fits, it runs as ever (it also proves the
        plan, in milliseconds there), and in deterministic mode too."""
        if self.det or (self.short() or 0.0) <= 0 or d.victims:
            return False
        return all(j in d.placements for j, i in self.problem.pending.items()
                   if i.held_until is None and i.candidates)

    # -- what may run -----------------------------------------------------------

    def room(self, s: Strategy) -> bool:
        """Does the time left hold ``s``, and the reserve?"""
        return self.work.fits(s.estimate_s(self.pace))

    def short(self) -> float | None:
        """Seconds missing to build and solve the whole model, keeping min_solve_s()
        and half as much again (> 0: it is skipped; None: deterministic mode)."""
        if self.det:
            return None
        least = min_solve_s()
        return self.pace.model_s() - self.work.less(least).left() - least / 2

    def affordable(self, *queued: Strategy) -> bool:
        """May optional candidates (``queued``) run? At most EXTRA_SHARE of the time
        left to improve the plan, and (always in deterministic mode): where the
        whole model fits in the time left, while it still fits after them; else
        leaving one whole LNS round where LNS has rounds to run, or time for a
        short solve of the whole model."""
        if self.det:
            return True
        left = self.work.left()
        cost = sum(s.estimate_s(self.pace) for s in queued)
        if cost > EXTRA_SHARE * left:
            return False
        missing = self.short() or 0.0
        if self.pace.lns_rounds and missing <= 0:
            # LNS will not run: a round's time kept for it would go unused
            # (test_the_baselines_are_candidates_when_the_whole_model_fits_in_a_short_budget)
            return missing + cost <= 0
        return left - cost >= (self.pace.rates.round_s() if self.pace.lns_rounds
                               else 2 * min_solve_s())

    def early_lane(self) -> bool:
        """Should the second lane start before the first greedy plan, with the
        per-node baselines first? Under an eviction budget (R13) they often admit far
        more than the greedy variants, but near the floor neither lane has time for
        them after the first greedy plan. Only when the policy has a budget, the
        cluster is as big as for any second lane, lanes are available, and the whole
        model is out of reach even before the greedy plan's time is counted."""
        pol = self.problem.policy
        if self.det or (pol.max_evictions_per_tick is None
                        and pol.max_evicted_gpu_fraction is None):
            return False
        if self.usable <= SQUEAKY_NEIGHBOURHOODS * NEIGHBOURHOOD_NODES:
            return False
        need = self.pace.model_s(measured=False)
        return need > self.work.seconds - min_solve_s() / 2 and lanes_available(self.workers)

    def variant_plan(self) -> Decision | None:
        """The plan of the best greedy variant or squeaky-wheel pass, as it came."""
        return None if self.variant_by is None else self.plan_of[id(self.variant_by)]

    def eject_variant(self, start: Decision, budget: Budget
                      ) -> Generator[tuple[Strategy, Budget], None, bool]:
        """Ejection moves on ``start``, the best greedy variant's plan, within
        ``budget``: their plan competes (Eject's ``origin``); whether it ranks first
        then (what they did is kept for solver.detail)."""
        other = Eject(start, traded=self.swapping, origin=self.variant_by)
        yield other, budget
        self.variant_done = True
        if self.by is not other:
            return False
        self.variant_said = other.said
        return True

    def eject_budget(self) -> Budget:
        """Ejection moves stop at ``end``, which leaves the last polishing pass its
        time, but not before EJECT_LEAST_SHARE of the time left (eject_deadline)."""
        return self.work.until(eject_deadline(time.perf_counter(), self.end.end,
                                              self.work.end))

    # -- the schedule -----------------------------------------------------------

    def schedule(self) -> Iterator[tuple[Strategy, Budget]]:
        """:meth:`steps`, until a plan is kept that places every pending job that may
        start on free GPUs (``everything_free``): then the lanes still running are
        stopped and the plan is returned."""
        steps = self.steps()
        try:
            for step in steps:
                yield step
                if self.settled:
                    break
        finally:
            steps.close()
            if self.settled:
                for lane in (self.lane, self.floor, self.proving):
                    child = None if lane is None else lane.lane
                    if child is not None:
                        child.close()

    def steps(self) -> Generator[tuple[Strategy, Budget], None, None]:
        """What runs next, in which budget: the greedy candidates, polishing, then
        the whole model or, when it does not fit, LNS and the passes after it."""
        yield from self.candidates()
        # polish the greedy plan: the fallback and the whole model's hint; LNS starts
        # from the greedy plan relocated but not repacked
        assert self.best is not None
        self.greedy = self.best
        pol = Polish(self.greedy, cheaper=False)
        yield pol, self.work
        self.polished, self.polish_s = pol.said, pol.took
        if not self.det and not self.cut and not pol.said and self.work.expired():
            # no time was left to polish a whole greedy plan (a steady tick of a loop
            # at a short limit): its repacking and moves to idle GPUs, which keep
            # every admission and only raise the priority value or spare victims,
            # still run, within LATE_POLISH_SHARE of the budget or LATE_POLISH_S
            late = Polish(self.greedy, cheaper=False)
            yield late, Budget(max(scaled(LATE_POLISH_S),
                                   LATE_POLISH_SHARE * self.budget.seconds))
            self.polished = late.said
        # the last pass (moves to cheaper victims) is kept CHEAPER_TIMES x this time
        self.end = self.work.less(CHEAPER_TIMES * pol.took)
        missing = self.short()
        if missing is not None and missing > 0:
            self.why = ("no time left to build and solve the model after the greedy plan "
                        f"({_more(missing)} would let CP-SAT solve the whole model)")
            yield from self.without_model()
            return
        yield from self.whole_model()
        if self.model is None:
            self.why = "the model could not be built in time" + (
                f" (before it, ejection moves on the plan so far: {self.pre_ejected})"
                if self.pre_ejected else "")
            yield from self.without_model()
        if self.carried is not None and self.det:  # (see candidates())
            yield Carried(self.carried), self.work

    def _fit_reserve(self, d: Decision) -> Budget:
        """The time to improve the plan, once the first greedy run made a whole plan
        ``d``: the reserve (_reserve(), from the tick's size before any plan) lowered to
        what a plan of ``d``'s size takes to assemble and check (reserve_keep(), fitted to
        that work), RESERVE_FIT_TIMES over, and never below 5% of the limit with the
        margin. A steady tick of a loop (a big cluster, a small plan, most jobs
        deferred) kept about 0.17 s at 4,096 nodes for some 0.1 s of assembly and
        checks, and at 0.4 s had no time for a second greedy run of 5 ms."""
        placed = len(d.placements) + len(d.victims)
        deferred = len(self.whole.pending) - len(d.placements)
        need = RESERVE_FIT_TIMES * reserve_keep(self.budget, self.usable).keep_s(placed,
                                                                               deferred)
        fitted = max(need, 0.05 * self.budget.seconds + reserve_margin_s())
        if fitted < self.reserve:
            old, self.reserve = self.work, fitted
            self.work = self.budget.less(fitted)
            if self.end is old:
                self.end = self.work
        return self.work

    def late_pack(self, keep: CutKeep, d: Decision, deferred: int) -> None:
        """Where the packing of the first tier's gangs was left out before the
        greedy plans (the time left too short: candidates()), it runs after the first
        greedy run ``d`` for its bound alone: CP-SAT's bound on the tier's GPUs, which
        the plan reports (solver.gap, status RELAXATION), its gangs not placed first.
        Only where the time left holds the packing (PACK_BOUND_NODE_S) besides what
        the plan's assembly and checks are expected to take: ``keep`` for ``d`` (with
        ``deferred`` jobs searched and not placed) without its CUT_SAFETY, within
        which the plans of the keep's fit took 0.6-0.85 x the keep. A run cut by the
        keep leaves that much (0.07 s at 12,500 nodes and 1 s, for 0.03 s of
        packing); one the least loop took past its cut leaves none."""
        need = keep.keep_s(len(d.placements), deferred, len(d.victims))
        if self.budget.left() < need / CUT_SAFETY + scaled(PACK_BOUND_NODE_S * self.usable):
            return
        self.packing = pack_gangs(self.problem, self.budget.less(need), seed=self.seed)
        self.packing.first, self.packing.after = frozenset(), True
        self.problem.packed_bound = self.packing.bounds()

    def candidates(self) -> Iterator[tuple[Strategy, Budget]]:
        """The greedy variants, their squeaky-wheel passes and the baselines, as the
        time allows (docs/planner.md, section 2); the second lane started where the
        whole model will be skipped (section 2c)."""
        work = self.work
        # (deterministic mode looks at no clock and measures no machine)
        tight = not self.det and work.left() < first_least_s()
        quick = 0.0 if self.det else free_quick_s(self.usable)
        jobs = sum(1 for i in self.problem.pending.values()
                   if i.candidates and i.held_until is None)
        if not tight:
            # the first tier's gangs that keep a group, packed into the groups with room
            # by CP-SAT: the greedy variants place those it chose first
            # (planner/solver/packing.py). Not where the time left holds less than the
            # first greedy run's least (tight): there the gangs' searches, taken first,
            # leave the tier's other jobs less time (12,500 nodes at 1 s: 4,623-4,951
            # tier-1 GPUs against 6,583)
            self.packing = pack_gangs(self.problem, work, deterministic=self.det,
                                      seed=self.seed)
            self.problem.packed = self.packing.first
            self.problem.packed_bound = self.packing.bounds()
        # where the time left holds less than the first greedy run's least, and a
        # whole greedy run (FLOOR_RUN_TIMES x the jobs on free GPUs alone) would take
        # longer than the whole limit (the biggest clusters at short limits), no lane:
        # its run would not end in time, and its fork slows this process's run (pages
        # copied on write; at 12,500 nodes and 1.2 s, 3,400-4,600 tier-1 GPUs and no
        # tier-2 GPU with the floor lane, 4,600-5,000 and 240-2,500 without)
        alone = tight and FLOOR_RUN_TIMES * quick * jobs > self.budget.seconds
        if not alone and self.early_lane():
            lane = SecondLane(list(EARLY_LANE), None, traded=self.swapping)
            if lane.start(self.problem, work):
                self.lane, self.in_lane = lane, EARLY_LANE
        floor: Greedy | FloorLane = Greedy({})  # the plain greedy plan (below)
        if (self.lane is None and not self.det and not alone
                and self.usable > SQUEAKY_NEIGHBOURHOODS * NEIGHBOURHOOD_NODES
                and self.pace.pairs >= FLOOR_LANE_PAIRS and lanes_available(self.workers)):
            # on a big cluster, with much to search, the floor is made on the other
            # core meanwhile
            lane_floor = FloorLane()
            # (which then proves the tier items' bound for its plan, where it applies
            # and is expected to end before the time for the verifier and freeing
            # what the tick built, about half the reserve: without_model, plan())
            if lane_floor.start(self.problem, self.budget.less(self.reserve / 2)):
                floor = self.floor = lane_floor
        # hint and fallback: the greedy variant that spares capacity less important
        # pending jobs need (usually admits more); its time sets the pace
        # it stops half the time kept for assembly and checks after the time to improve
        # the plan, 2 x FIRST_LEAST_S at most (a plan cut short has fewer jobs to
        # explain in full, and no other candidate to trade; on the biggest clusters
        # the whole plan's checks need the reserve), its loop gets FIRST_LEAST_S at
        # least, and its search for victims once the jobs left would only
        # just fit in that time on free GPUs alone (free_quick_s(); in the first tier
        # its own jobs, plus what a first search for victims may take,
        # first_search_s()): where
        # preprocessing, assembly and the checks take most of the limit (big clusters),
        # the plan places the jobs it reaches, higher tiers first, and says which it did
        # not consider. Where the reserve (a whole plan's) leaves it less than
        # FIRST_LEAST_S (the biggest clusters at short limits), or less than a whole
        # run (SEARCH_TIMES x a free search per job), it may go on until what the
        # plan it holds takes to assemble and check is left (cut_keep()): a plan that
        # holds less takes less.
        # Where even that would not hold a whole run (SEARCH_TIMES x a free search per
        # job), each tier's jobs take free GPUs first and are searched for victims
        # after, as time allows (GreedyPlanner.solve, free_first): a run cut within a
        # tier still holds what free GPUs give it
        # (where the packing was left out, tight, it runs after this run for its bound
        # alone where the time left allows: late_pack, below)
        keep = None
        if self.det:  # (nothing looks at the clock, nor measures the machine)
            first = Greedy({"spare_lower": True})
        else:
            keep = cut_keep(self.budget, self.usable,
                            len(self.reduction.beyond) + len(self.reduction.dropped))
            whole_run_s = SEARCH_TIMES * quick * jobs
            room = max(first_least_s(), self.budget.left() - keep.keep_s(0, 0))
            first = Greedy(
                {"spare_lower": True}, quick=quick, least=first_least_s(),
                search_s=first_search_s(self.usable),
                later=keep if tight or whole_run_s > work.left() else None,
                free_first=whole_run_s > (1 if tight else FREE_FIRST_TIMES) * room)
        soft = work if self.det else self.budget.until(
            work.end + min(self.reserve / 2, 2 * first_least_s()))
        yield first, soft
        assert first.planner is not None
        self.spare = spare = first.planner
        self.pace.greedy_s = self.budget.elapsed()
        if tight and keep is not None:
            self.late_pack(keep, self.plan_of[id(first)], spare.deferred)
        if not self.det and not (spare.unreached or spare.free_only):
            work = self._fit_reserve(self.plan_of[id(first)])
        if spare.unreached or spare.free_only:  # cut short: a whole run's time, estimated
            tried = sum(1 for i in self.problem.pending.values() if i.candidates)
            self.pace.greedy_s *= tried / max(1, tried - len(spare.unreached)
                                              - len(spare.free_only))
        if isinstance(floor, FloorLane):
            floor.wait_s = self.pace.greedy_s
        if self.carried is not None and not self.det:
            # (kept where it is better: the passes and the search start from it; in
            # deterministic mode it competes at the end instead, so that the search is
            # plan()'s and the plan never below it: steps())
            yield Carried(self.carried), work
        self.pace.lns_rounds = (self.usable > NEIGHBOURHOOD_NODES
                                or len(neighbourhoods(self.problem)) > 1)
        variants: list[Greedy] = [Greedy({})] if self.det else []
        storm = Greedy({"spare_lower": True, "storm_price": STORM_PRICE,
                        "priced": frozenset(spare.full_storages)})
        no_free = Greedy({**storm.settings, "spare_free": False})
        if (self.lane is None and not self.det
                and self.usable > SQUEAKY_NEIGHBOURHOODS * NEIGHBOURHOOD_NODES
                and (self.short() or 0.0) > 0 and lanes_available(self.workers)):
            # the model will be skipped and the plan is made in Python on one core: a
            # second lane on the other core runs the other variants too (docs/planner.md,
            # section 2c), the per-node baselines first, and there alone, when an
            # eviction budget binds (they take 3 and 2.5 greedy runs, which this lane
            # spends on the variants and ejection moves); it proves the tier items'
            # bound after its first candidate, for the better of its plan and this
            # one's so far
            todo: list[dict | str] = [
                *((storm.settings, no_free.settings) if spare.storm_rejected else ()),
                PRIORITY_FIRST]
            if spare.budget_rejected:
                todo = ["k8s", "slurm", *todo]
            lane = SecondLane(todo, self.pace.greedy_s, traded=self.swapping,
                              hint=self.best if spare.budget_rejected else None)
            if (lane.estimate_s(self.pace) <= work.less(lane_grace_s()).left()
                    and lane.start(self.problem, work)):
                if isinstance(floor, FloorLane):
                    floor.no_proof()  # (this lane proves the bound: the other core is its)
                self.lane = lane
                self.in_lane = tuple(t for t in todo if isinstance(t, str))
        k8s = Baseline("k8s")
        if spare.budget_rejected and "k8s" not in self.in_lane and self.room(k8s):
            # an eviction budget (R13) refused victims: the per-node baselines often
            # admit more under a count budget; the Kubernetes-style one first
            self.computed.add("k8s")
            yield k8s, work
        if spare.storm_rejected and self.room(storm):
            # the storage limit refused victims: spend the storm budget on victims with
            # small checkpoints, and optionally the same without sparing free GPUs
            variants.append(storm)
            if self.affordable(*variants, no_free):
                variants.append(no_free)
        prio = Greedy(PRIORITY_FIRST)
        if PRIORITY_FIRST not in self.in_lane and self.affordable(*variants, prio):
            variants.append(prio)  # more important jobs first within a tier
        ran = [(first.settings, self.plan_of[id(first)])]
        for v in variants:
            yield v, work
            ran.append((v.settings, self.plan_of[id(v)]))
        if self.usable > SQUEAKY_NEIGHBOURHOODS * NEIGHBOURHOOD_NODES:
            # squeaky wheel: each variant once more, best plan first, with the jobs it
            # deferred first in their tier
            ran.sort(key=lambda r: self.key(r[1]), reverse=True)
            for settings, d in ran:
                again = Squeaky(settings, d)
                if not (self.det or again.estimate_s(self.pace) <= SQUEAKY_SHARE * work.left()):
                    break
                yield again, work
        cut = first.later is not None and bool(spare.unreached or spare.free_only)
        self.cut = cut
        if not self.det and not (cut and self.budget.left() < self.reserve):
            # the plain greedy plan (the greedy baseline's) as a floor, after the
            # passes above so that they keep their time; not where the first run was
            # cut to what its own plan needs (a whole plan needs the whole reserve);
            # made here, it may run into the reserve as the first run may (soft): a
            # floor cut at once where the passes took the time to improve the plan
            # left the first run's plan below greedy's (steady ticks at short limits)
            yield floor, (soft if isinstance(floor, Greedy) and soft.end > work.end else work)
            if isinstance(floor, Greedy):
                self.floor_run = floor
        elif isinstance(floor, FloorLane) and floor.lane is not None and not (
                floor.proving and floor.lane.ready()):
            floor.lane.close()  # (its plan is not wanted: the other core freed now)
        # (where its plan has come, and it proves the tier items' bound after it, that
        # bound is still wanted: the plan is read and left, plan(); a child still on
        # its plan is stopped, as its bound would rarely come in time: on an 8,192-node
        # cluster at 1 s its plan came at 0.74 s, and the plan took 0.04 s more)
        for name in ("slurm",) if spare.budget_rejected else ("k8s", "slurm"):
            b = Baseline(name)
            if name not in self.in_lane and (self.room(b) if spare.budget_rejected
                                             else self.affordable(b)):
                self.computed.add(name)
                yield b, work

    def whole_model(self) -> Iterator[tuple[Strategy, Budget]]:
        """The whole model, hinted with the polished plan (with cheaper victims too),
        then, on a plan not proven optimal, ejection moves and polishing.
        ``self.model`` stays None when it could not be built in time."""
        work = self.work
        if self.lane is not None:  # (not expected: the model was to be skipped)
            self.lane.close()
        if self.floor is not None:  # (the model's workers take both cores)
            self.floor.no_proof()
        assert self.best is not None
        alt = self.variant_plan()
        if (not self.det and self.prune and self.pace.pairs > EXACT_PAIRS
                and self.usable > 2 * NEIGHBOURHOOD_NODES
                and alt is not None and alt is not self.best and alt is not self.greedy):
            # a pruned model (a heuristic too) on a big cluster, a baseline's plan ranked
            # first: ejection moves from the best greedy variant's plan first, as where
            # the model is skipped (without_model), while the model keeps its build and
            # as long a solve, and their plan, if it ranks first, hints the model (a
            # 1,600-node cluster at 3 s, where the model only just fits: 937/299 GPUs of
            # tiers 1 and 2 against 937/204-211 from the baseline's plan)
            build = self.pace.build_s()
            yield from self.eject_variant(alt, work.less(build + max(build, 2 * min_solve_s())))
        if self.swapping and id(self.best) in self.moved:
            # exempt jobs took free GPUs first in the plan so far: the model, which
            # ranks plans by the contract's objective, ranks the plans they trade away
            # higher (its own too), so ejection moves on the traded plan come first,
            # in a share of the time, and hint the model
            pre = Eject(self.best, traded=True)
            within = work.share(EJECT_SHARE)
            missing = self.short()
            if missing is not None and missing < 0:
                # and the time the model does not need: a model hinted with a plan
                # ejection has not finished with often ends below it (at 1,024 nodes
                # and 5 s, 608/352 GPUs against the 1 s plan's 608/360)
                within = work.until(max(within.end, time.perf_counter() - missing))
            # its rounds (admissions) go on to their end while the model still has the
            # time to be built and solved as long (a big model's presolve alone takes a
            # good part of its build); its swaps stop at ``within``
            build = self.pace.build_s()
            rounds = work.less(build + max(build, 2 * min_solve_s()))
            if rounds.end > within.end:
                pre = Eject(self.best, traded=True, swaps_by=within)
                within = rounds
            yield pre, within
            self.pre_ejected = pre.said
        yield Cheaper(self.best), work.less(min_solve_s(self.det))
        used: dict[str, frozenset[int]] = {}  # pruning keeps the nodes greedy plans used
        for d in self.plans:
            for j, parts in d.placements.items():
                used[j] = used.get(j, frozenset()) | {ni for ni, _m in parts}
        model = WholeModel(self.best, used, factor=0 if self.pace.pairs <= EXACT_PAIRS
                           or not self.prune else 4, deterministic=self.det,
                           workers=self.workers, seed=self.seed, log=self.log)
        yield model, work
        if model.timed_out:
            return
        self.model, self.wall = model, self.budget.elapsed()
        res = model.result
        if res is None or res.best is None:
            return
        assert model.model is not None
        self.proven = (len(res.statuses) == len(res.phases)
                       and all(s == "OPTIMAL" for s in res.statuses)
                       and not model.model.approximate and not model.model.pruned
                       and res.realised  # (the plan is the solution the phases proved)
                       and self.best is res.best)  # (not the hint, which ranked higher)
        self.bound_info = res.bound_info if res.realised else None
        self.cost_bound = res.cost_bound if self.best is res.best and res.realised else None
        if not self.proven:  # an unproven plan may still leave a swap or a move
            ejection = Eject(self.best, traded=self.swapping)
            yield ejection, self.eject_budget()
            last = Polish(self.best)
            yield last, work
            self.more = last.said
            if ejection.said:  # the phases' bounds were for other admissions
                self.more = also(ejection.said, self.more)
                self.bound_info = self.cost_bound = None

    def without_model(self) -> Iterator[tuple[Strategy, Budget]]:
        """The whole model does not fit: LNS improves the greedy plan one
        neighbourhood at a time with what is left (planner/solver/lns.py), then ejection
        moves, the baselines not yet computed, the last polishing pass, and the
        second lane's plan. On a cluster of more than two neighbourhoods ejection
        moves come first and LNS gets what they leave (a round re-solves one part
        of the cluster, where the moves search all of it; docs/planner.md, 2b)."""
        assert self.best is not None and self.spare is not None and self.greedy is not None
        floor = self.floor if self.floor is not None and self.floor.proving else None
        if (self.lane is None and not self.det and lanes_available(self.workers)
                and (floor is None or BoundLane.whole_fits(self.problem, self.work))):
            # no second lane runs: the other core proves the relaxation's bound for the
            # plan so far meanwhile, where its build fits in the time left; where the
            # floor lane's child proves the tier items' bound for its plan, started
            # earlier, only the whole relaxation's bound is worth its place
            if floor is not None:
                floor.no_proof()
            proving = BoundLane(self.best)
            if proving.start(self.problem, self.work):
                self.proving = proving
        packed, end, spare = self.best, self.end, self.spare
        rounds = end.less(1.5 * self.polish_s)  # LNS keeps as much to polish its result
        big = self.usable > 2 * NEIGHBOURHOOD_NODES
        first: Eject | None = None  # (ejection before LNS, on a big cluster)
        alt = self.variant_plan()
        if big and not self.variant_done and alt is not None and alt is not self.best and (
                alt is not self.greedy
                or self.eject_budget().left() >= scaled(VARIANT_EJECT_LEAST_S)):
            # a baseline's plan ranks first, or the variant's polished with time to
            # spare (VARIANT_EJECT_LEAST_S): ejection moves go much further from the
            # best greedy variant's plan as it came (EJECT_VARIANT_SHARE, docs/planner.md
            # 2b), in a share of their time; what they make competes. Where it ranks
            # first then, the plan ranked first before gets a share too (it may hold
            # what the variant's does not: on a 4,096-node cluster a tier-1 gang of 64
            # GPUs), and the moves after go on from the plan then ranked first
            ranked, made = self.best, self.by
            if (yield from self.eject_variant(alt, self.eject_budget().share(
                    EJECT_VARIANT_SHARE))) and made is not None:
                back = Eject(ranked, traded=self.swapping, origin=made)
                yield back, self.eject_budget().share(EJECT_VARIANT_SHARE)
            packed = self.best
        if big:
            first = Eject(self.best, traded=self.swapping)
            yield first, self.eject_budget()
            packed = self.best
        # keep a share for ejection moves when LNS still gets its whole rounds: one,
        # or two on a cluster of more than two neighbourhoods (fewer re-solve a small
        # part of it; docs/planner.md, section 3a)
        keep = EJECT_SHARE * max(0.0, end.left())
        # (one worker where the other core is a second lane's, or the whole relaxation's)
        busy = self.lane is not None or (self.proving is not None and self.proving.whole)
        lns = Lns(self.greedy if first is None else self.best, packed, end,
                  workers=max(1, self.workers - 1) if busy else self.workers,
                  seed=self.seed, whole=2 if big else 1)
        worth = not self.det  # (LNS runs only with a wall clock)
        if worth and rounds.left() - keep >= lns.estimate_s(self.pace):
            rounds = rounds.less(keep)
        else:
            worth = worth and not big
        if worth and rounds.left() >= lns_min_s():
            yield lns, rounds
            if lns.rounds is None:
                self.why += f"; {lns.said}"
            else:
                self.lns = lns
        # ejection moves on the plan to return; without a binding eviction budget
        # before the baselines below, which are rarely better there
        ejection: Eject | None = first
        if not spare.budget_rejected and (first is None or self.best is not packed):
            ejection = Eject(self.best, traded=self.swapping)
            yield ejection, self.eject_budget()
        # LNS stops after a pass without improvement, often well before its deadline:
        # the baselines not computed yet compete in the time left
        for name in ("k8s", "slurm"):
            b = Baseline(name)
            if name in self.computed or name in self.in_lane or not end.fits(
                    b.estimate_s(self.pace)):
                continue
            self.computed.add(name)
            yield b, self.work
            if self.by is b:
                pol = Polish(self.best, cheaper=False)
                yield pol, end
                self.base_said = (f"the {BASELINE_NAMES[name]} baseline's plan, better, "
                                  "returned" + (f" after {pol.said}" if pol.said else ""))
                ejection = None
        if self.base_said or (spare.budget_rejected
                              and (first is None or self.best is not packed)):
            ejection = Eject(self.best, traded=self.swapping)
            yield ejection, self.eject_budget()
        last = Cheaper(self.best)
        yield last, self.work
        # (the first ejection's moves too, when a second one ran on a plan LNS changed)
        again = first is not None and ejection is not None and ejection is not first
        before = first.said if again and first is not None and not self.base_said else ""
        later = ejection.said if ejection else ""
        self.after = also(self.variant_said, before,
                          f"after LNS {later}" if before and later else later, last.said)
        if self.lane is not None:
            self.lane.fallback = self.best
            yield self.lane, self.work
            if self.by is not self.lane and self.lane.error:
                self.why += f"; the second lane gave no plan ({self.lane.error})"
            # the tier items' bound it proved (bound.prove_tiers), for its own plan
            self.proof = self.lane.proof
        if self.proving is not None:
            self.proof = self.proving.result(self.work)
        if self.proof is None and self.floor is not None and self.floor.ready():
            # the tier items' bound for the floor lane's plan (FloorLane), where it came
            # (else it is waited for after the plan's assembly: _late_floor_proof):
            # judged for the plan returned as the others are (_lane_bound)
            self.proof = self.floor.proof(self.work)

    # -- the plan ---------------------------------------------------------------

    def plan(self) -> Plan:
        """The best plan, assembled, with what the strategies did; with
        ``thrash.exempt_free_first`` applied (planner/core/decision.py): a plan in
        which an exempt job moved is measured against the plain objective's bounds
        the whole model's phases proved (:meth:`_traded_gap`), not claimed optimal by
        the model's own status."""
        assert self.best is not None
        status, info = self._outcome()
        best, moved, note = self._exempt_free_first(self.best)
        best, _ = first_come(self.whole, best)  # (the same objective: status and bounds hold)
        # (item 6; in wall-clock mode at most BEST_FIT_SHARE of the limit: the cut
        # keep above counts on it taking little)
        best, _ = best_fit(self.whole, best, None if self.det else self.budget.slice(
            BEST_FIT_SHARE * self.budget.seconds))
        if moved or note:
            gap, bound, proof, item = self._traded_gap(best)
            info = info.model_copy(update={"gap": gap, "bound": bound, "detail": "; ".join(
                x for x in (info.detail, note, moved and "then " + moved_note(moved), proof)
                if x)})
            info.name_gap_item(item)
            status = "optimal" if gap == 0.0 else "feasible" if status == "optimal" else status
        traded = bool(moved or note)
        plain = status, info  # (before any bound from the other core or the packing)
        status, info = self._bounded(best, status, info, self.proof, traded)
        by = self.by if self.by is not None else Strategy()  # (the returned plan's run)
        unreached = by.unreached - best.placements.keys()
        free_only = by.free_only - best.placements.keys()
        try:
            t0 = time.perf_counter()
            out = assemble(self.whole, best, *self._told(status, info, by, unreached, free_only),
                           unreached=unreached, free_only=free_only)
            late = self._late_floor_proof(time.perf_counter() - t0)
            if late is not None:
                status, info = self._bounded(best, *plain, late, traded)
                status, info = self._told(status, info, by, unreached, free_only)
                out = out.model_copy(update={"status": status, "solver": info})
        finally:
            if self.floor is not None and self.floor.lane is not None:
                self.floor.lane.close()
        return out

    def _bounded(self, best: Decision, status: str, info: SolverInfo,
                 proof: BoundResult | None, traded: bool) -> tuple[str, SolverInfo]:
        """Where the whole model was skipped: ``status`` and ``info`` with the bound
        ``proof`` proved on the other core (or None), or that of the packing of the
        first tier's gangs (planner/solver/packing.py) where it is lower on that tier,
        judged for ``best`` (_lane_bound)."""
        if self.model is not None or self.settled:
            return status, info
        found, where = proof, " on the other core"
        packed = (None if self.packing.bound is None
                  else self.packing.proof(item_values(self.problem, best)))
        if packed is not None and packed.items and (
                found is None or not found.items
                or (found.items[0][0] == packed.items[0][0]
                    and packed.items[0][2] < found.items[0][2])):
            found, where = packed, (" packing its gangs, after the first greedy plan"
                                    if self.packing.after
                                    else " packing its gangs, before the greedy plans")
        if found is None:
            return status, info
        return self._lane_bound(found, best, status, info, traded=traded, where=where)

    def _late_floor_proof(self, assembly_s: float) -> BoundResult | None:
        """The floor lane's bound (FloorLane) where it had not come when the strategies
        ended and no other bound from the other core was had: waited for after the
        plan's assembly (which took ``assembly_s``), while the time left still holds
        VERIFY_TIMES x that for the verifier and freeing what the tick built (on the
        benchmark ticks they took 1.0-1.2 times the assembly)."""
        floor = self.floor
        if (floor is None or not floor.pending or self.proof is not None
                or self.model is not None or self.settled):
            return None
        within = self.budget.less(VERIFY_TIMES * assembly_s)
        if within.expired() and not floor.ready():
            return None
        return floor.proof(within.less(-lane_grace_s()))

    def _told(self, status: str, info: SolverInfo, by: Strategy, unreached: frozenset[str],
              free_only: frozenset[str]) -> tuple[str, SolverInfo]:
        """``status`` and ``info`` with what comes before and after the detail so far:
        the reduction's, the carried plan's and the packing's notes, and a plan cut
        short."""
        said = []  # sentences after the detail so far
        if unreached or by.free_only:
            said.append(f"{CUT_NOTE}: "
                        f"{len(by.free_only)} pending job(s) after it could take only free "
                        f"GPUs ({len(free_only)} found none), {len(unreached)} were not "
                        "considered; those deferred are OUTRANKED (see 'Choosing "
                        "time_limit_s' in the README)")
        floor = self.floor_run
        short = 0 if floor is None else len(floor.unreached) + len(floor.free_only)
        if short and by is not floor and status != "optimal":
            # the floor (the greedy baseline's plan) is no floor where it was cut short
            said.append(f"the time left too little for the plain greedy plan (the greedy "
                        f"baseline's): it did not reach {short} pending job(s), so the "
                        "greedy planner, run to its end, may find a better plan")
        # the reduction's note first: it is what happened first
        before = [x for x in (self.reduction.note(), self.carried_note, self.packing.said())
                  if x]
        if before or said:
            info = info.model_copy(update={"detail": "; ".join(
                x for x in (*before, info.detail, *said) if x)})
        return status, info

    def _lane_bound(self, proof: BoundResult, best: Decision, status: str, info: SolverInfo,
                    *, traded: bool, where: str = " on the other core"
                    ) -> tuple[str, SolverInfo]:
        """Where the whole model was skipped: the bound proved on the other core
        (BoundLane, for the plan so far then) judged for the plan returned, ``best``
        (BoundResult.judge): its gap, and the status ``feasible`` (``optimal`` where
        it reaches every bound); ``solver.status`` RELAXATION where it was SKIPPED."""
        if not proof.items or any(j not in self.problem.pending for j in best.placements):
            return status, info
        res = proof.judge(item_values(self.problem, best))
        if not res.items:
            return status, info
        said = res.said(f" in {res.seconds:.2f} s{where}", traded=traded)
        update: dict[str, Any] = {"detail": "; ".join(x for x in (info.detail, said) if x)}
        if info.status == "SKIPPED":
            update["status"] = "RELAXATION"
        if res.gap is not None:
            update["gap"] = round(res.gap, 6)
            if res.cost_bound is not None:
                update["bound"] = round(res.cost_bound, 6)
            status = "optimal" if res.proven else "feasible"
        out = info.model_copy(update=update)
        if res.gap is not None:
            out.name_gap_item(res.items[-1][0])
        return status, out

    def _traded_gap(self, best: Decision
                    ) -> tuple[float | None, float | None, str, str | None]:
        """After ``thrash.exempt_free_first`` traded admissions away, the gap of the plan
        returned (``best``) against the bounds the whole model's phases proved for the
        plain objective (CpsatModel.gap_of), where the model ran and holds every plan:
        (gap, the least eviction cost where the plan reaches the admissions' bounds,
        what to say, the item the gap is at), or no gap."""
        model = self.model
        res = None if model is None else model.result
        if (model is None or res is None or model.model is None or model.model.pruned
                or model.model.approximate or not res.bounds):
            return None, None, "", None
        found = model.model.gap_of(res, best, self.whole)
        if found is None:
            return None, None, "", None
        name, val, bnd = found
        cost = objective_of(self.whole, best).planned_cost()
        if not name:
            return 0.0, round(cost, 6), ("the whole model's phases prove the plan optimal "
                                         "all the same"), None
        bound = (round(max(0.0, bnd), 6) if name == "eviction cost"
                 else round(cost, 6) if name == "evictions" else None)
        return round(relative_gap(val, bnd, name), 6), bound, (
            f"bound from the whole model's phases: the plan {name} {val:,.0f} against at "
            f"{'least' if name in LEAST_ITEMS else 'most'} {bnd:,.0f} {TRADED_NOTE}"), name

    def _exempt_free_first(self, best: Decision) -> tuple[Decision, int, str]:
        """The swap of ``thrash.exempt_free_first`` on the best plan (the decision, how
        many exempt jobs moved, a note). The swap may leave the other job without a
        place that a plan built around the free GPUs from the start has: every plan
        a strategy made (the greedy plans and the baselines' among them, so the
        returned plan is never worse than theirs) competes, swapped too. Where
        ``swapping``, every plan was kept after its trade (:meth:`keep`): the best is
        returned as it is, with the exempt jobs moved on the way to it, and the note
        says when a plan that ranked higher by the objective alone lost to it."""
        if self.swapping:
            hit = self.moved.get(id(best))
            moved = hit[1] if hit is not None and hit[0] is best else 0
            return best, moved, (f"{_plan_name(self.by)} is better once exempt jobs take "
                                 "free GPUs first (thrash.exempt_free_first): returned"
                                 if self.raw_top > self.key(best) else "")
        d, moved = exempt_free_first(self.problem, best)
        if not moved:
            return d, moved, ""
        note = ""
        key = objective_of(self.problem, d).key()
        # a trade never raises a plan's rank (admissions can only fall; at equal
        # admissions the victims are the same): only plans that rank above the best
        # traded one so far are traded, best first
        by: dict[int, Strategy] = {}
        for s in self._strategies:
            by.setdefault(id(self.plan_of[id(s)]), s)
        for other in sorted({id(x): x for x in self.plan_of.values()}.values(),
                            key=self.key, reverse=True):
            if self.key(other) <= key or self.budget.expired():
                break
            g, g_moved = exempt_free_first(self.problem, clean(self.problem, other))
            g_key = objective_of(self.problem, g).key()
            if g_key > key:
                d, moved, key = g, g_moved, g_key
                self.by = by.get(id(other), self.by)
                note = (f"{_plan_name(by.get(id(other)))} is better once exempt jobs take "
                        "free GPUs first (thrash.exempt_free_first): returned")
        return d, moved, note

    def _outcome(self) -> tuple[str, SolverInfo]:
        """The best plan's status and solver information."""
        problem, best = self.problem, self.best
        assert best is not None

        def info(status: str, detail: str) -> SolverInfo:
            return SolverInfo(engine="cp-sat", status=status, wall_s=self.budget.elapsed(),
                              detail=detail)

        if self.settled:
            moves = also(*(s.said for s in self._strategies
                           if s.keeps == "always" or (s is self.by and isinstance(s, Eject))))
            if self.lane is not None and self.by is self.lane:
                origin = self.lane.said
            else:
                origin = ("the greedy plan" if isinstance(self.by, WholeModel)  # (not built)
                          else _plan_name(self.by)) + " returned"
            return "optimal", SolverInfo(
                engine="cp-sat", status="OPTIMAL", wall_s=self.budget.elapsed(), gap=0.0,
                bound=0.0, detail=origin + (f" after {moves}" if moves else "")
                + "; it places every pending job that may start on free GPUs: optimal, "
                "nothing to improve")
        model = self.model
        if model is None:  # the whole model was skipped
            if self.lane is not None and self.by is self.lane:
                return "fallback", info("SKIPPED", f"{self.why}; {self.lane.said}")
            if self.base_said:
                return "fallback", info("SKIPPED", f"{self.why}; "
                                        f"{also(self.base_said, self.after)}")
            if self.lns is not None:
                assert self.lns.rounds is not None
                more = also(self.lns.said, self.after)
                return ("feasible", info(
                    "LNS", f"{self.why}; the greedy plan{self.second} was improved in "
                    f"{self.lns.rounds[0]} of {self.lns.rounds[1]} neighbourhood rounds"
                    + (f", then by {more}" if more else "")))
            said = also(self.polished, self.after)
            return ("fallback", info(
                "SKIPPED", f"{self.why}; greedy plan{self.second} returned"
                + (f" after {said}" if said else "")))
        assert model.model is not None
        if not model.model.classes:
            return ("optimal" if not model.model.approximate else "feasible",
                    SolverInfo(engine="cp-sat", status="OPTIMAL", gap=0.0,
                               detail="nothing to place"))
        res = model.result
        assert res is not None
        if res.best is None:
            last = res.statuses[-1] if res.statuses else "NONE"
            return "fallback", SolverInfo(
                engine="cp-sat", status=last, wall_s=self.wall,
                detail=("the solver's solution could not be dealt into GPU indices; greedy "
                        "plan returned" if last == "EXTRACT_FAILED" else
                        "solver gave no solution in time; greedy plan returned"))
        statuses, cost_bound = res.statuses, self.cost_bound
        gap = None  # relative gap of the last phase, reported only when every phase ran
        # on a model that holds every plan (a pruned or approximate model's bound is
        # its own, not the tick's: plan(bound_s=...) proves one for those)
        whole = not model.model.pruned and not model.model.approximate
        if not whole:
            cost_bound = None
        if (whole and self.bound_info is not None and len(statuses) == len(res.phases)
                and "SKIPPED" not in statuses):
            obj, bnd = self.bound_info
            gap = 0.0 if self.proven else abs(bnd - obj) / max(1.0, abs(obj))
            if self.more and cost_bound is not None:  # the polished plan's cost
                cost = objective_of(problem, best).planned_cost()
                gap = max(0.0, cost - cost_bound) / max(1.0, cost)
        if self.proven:
            cost_bound = objective_of(problem, best).planned_cost()
        built = "" if self.det else f"; model built in {model.built_at:.3f} s"
        before = (f"{self.variant_said} before the model; " if self.variant_said else "") + (
            f"ejection moves on the plan so far after exempt jobs took free GPUs "
            f"first, before the model: {self.pre_ejected}; " if self.pre_ejected else "")
        detail = (f"{before}{len(res.phases)} phase(s): {', '.join(statuses)}{built}"
                  + ("; NVLink sets across cliques not modelled" if model.model.approximate
                     else "")
                  + ("; candidate nodes pruned" if model.model.pruned else "")
                  + ("" if whole else " (the model's bound is not the tick's: no gap; "
                     "plan --bound proves one)")
                  + (f"; then {self.more}" if self.more else ""))
        return "optimal" if self.proven else "feasible", SolverInfo(
            engine="cp-sat", status="/".join(statuses), wall_s=self.wall, gap=gap,
            bound=cost_bound, detail=detail)
