"""The strategies :func:`~planner.solver.cpsat.solve_cpsat` chooses from, and what they cost.

Each strategy is a small object with a ``name``, a cost estimate
(``estimate_s(pace)``, from times measured in this process: :class:`Pace`) and
``run(problem, budget) -> Decision``. What a strategy did, in words for
``solver.detail``, is in its ``said`` after it ran. ``keeps`` says how the
planner keeps its plan: ``"better"``, a candidate kept when it ranks higher than
the plan so far (lexicographically, :func:`~planner.core.decision.objective_of`);
``"always"``, a pass that improves the plan so far and never makes it worse;
``"as good"``, the whole model, whose plan carries its proof and is kept when it
ranks at least as high.

Costs are measured, not assumed: a greedy run's time is the first greedy plan's,
measured each call (:class:`Pace`); the whole model's build time per (job,
candidate node) pair is measured at each build of a big model in this process
(:class:`Rates`): the solve worth building it for is a multiple of it, and the
time kept for assembly and checks and each solve's overhead per variable scale
with it; so is an LNS round's time, at each LNS run (:class:`Rates`). Before the
first measurement of a process, each is the 2-core benchmark machine's
(docs/benchmarks.md) times this machine's speed factor (planner/solver/speed.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from planner.core.budget import Budget
from planner.core.decision import Decision, after_trade, clean, objective_of
from planner.core.problem import Problem
from planner.heuristics.baselines import get_baseline
from planner.heuristics.eject import eject, upgrade
from planner.heuristics.greedy import CutKeep, GreedyPlanner, squeaky_wheel
from planner.heuristics.repack import cheaper_victims, polish, relocate
from planner.solver.bound import (
    BoundResult,
    prove,
    prove_tiers,
    relaxation_s,
    tiers_apply,
    tiers_s,
    tighter,
)
from planner.solver.lanes import Lane
from planner.solver.lanes import grace_s as lane_grace_s
from planner.solver.lns import improve, round_s
from planner.solver.model import BuildTimeout, CpsatModel, PhaseResult, min_solve_s, run_phases
from planner.solver.speed import factor, scaled

EXACT_PAIRS = 60_000  # (pending job, candidate node) pairs up to which nothing is pruned
STORM_PRICE = 1e4  # GPU-s per GB flushed, in the storm-aware greedy variant
# settings of the greedy variant that takes the more important jobs of a tier first
PRIORITY_FIRST: dict[str, Any] = {"spare_lower": True, "order": "priority"}
BASELINE_NAMES = {"k8s": "Kubernetes-style", "slurm": "Slurm-style"}
# what a candidate costs, in greedy runs (a greedy run: the first greedy plan's time)
VARIANT_RUN = 1.5  # a greedy variant (its settings may search more than the first)
# a baseline, in first greedy runs (the spare variant's): measured on the generated
# clusters of benchmarks/bench_scale.py (median of 5, 2026-12-04), Kubernetes-style
# 2.5, 1.2, 1.9 and 2.5 runs at 256, 512, 1,024 and 4,096 nodes (3.8 at 12,500),
# Slurm-style 1.1, 0.8, 1.25 and 1.7-2.2 (2.5); a baseline runs to its end, whatever
# its budget, so it is estimated on the high side
BASELINE_RUNS = {"k8s": 3.0, "slurm": 2.5}
# the squeaky-wheel pass of a plan runs when one greedy run takes at most this share
# of the time left to improve the plan (docs/planner.md, section 2)
SQUEAKY_SHARE = 1 / 3
# the last polishing pass (moves to cheaper victims) is kept this many times the first
# two passes' time, and stops at its deadline, largest savings first: it took 3-5 times
# as long on the benchmark clusters when this was chosen, 0.6-1.4 times since (2 was
# measured and not kept: docs/planner.md, section 2a)
CHEAPER_TIMES = 4.0
# the second lane's ejection moves leave the tier items' bound this many times what
# it is expected to take (bound.tiers_s): at 1,024 nodes and 1 s it took 0.04-0.05 s
# for an estimate of 0.036 s, and once in the five plans of a benchmark it was cut
# after tier 1 (no gap reported)
TIERS_KEEP_TIMES = 1.5
# ejection moves in deterministic mode stop after this many tried moves (R14)
EJECT_TRIES = 1000
# ... and with a wall clock never before this share of the time left until the last
# polishing pass must end (eject_deadline): admitted GPUs rank before the cost that
# pass saves. 0.7 rather than 0.5: bench_ab.py against 0.5 (2026-12-07), cut runs
# (seed 11) better 6 / worse 3 / same 15, +650/-219 GPUs; seed 2026 9/5/34, +452/-68;
# with eviction budgets (seed 2027) 3/5/40, +40/-100, the clusters rerun alike in
# 4 of 4 plans; the 4,096-node benchmark tick at 1 s admits 825 tier-2 GPUs where
# 0.1 s of ejection admitted 785
EJECT_LEAST_SHARE = 0.7
# The whole model: its build time per (job, candidate node) pair, counted up to
# EXACT_PAIRS, is measured (Rates); this, measured on the benchmark machine and
# scaled by this machine's speed factor, is the first build's estimate. Builds of
# fewer pairs than MEASURE_PAIRS are not measured: their fixed costs would dominate.
BUILD_PAIR_S = 6e-6
MEASURE_PAIRS = 10_000
# ... and at least this per usable node: a pruned model keeps EXACT_PAIRS pairs' worth
# of candidates, but its rows and victims grow with the cluster (measured at a speed
# factor of 0.7: 0.37 s at 1,024 nodes, 0.76 s at 2,048, 1.73 s at 4,096)
BUILD_NODE_S = 6e-4
# ... plus a fixed part on the benchmark machine (build_fixed_s(): on this one)
BUILD_FIXED_S = 0.01
# the reserve for assembly and checks keeps this margin on the benchmark machine
# (reserve_margin_s(): on this one), besides a share of the budget and their work
RESERVE_MARGIN_S = 0.02
# freeing what a tick built, per running job, pending job and node, before plan()
# returns (its problem, and a snapshot it read: on the benchmark machine 0.017 s and
# 0.049 s at 4,096 nodes, 0.069 s and 0.146 s at 12,500, given the snapshot or its file)
FREE_S_PER_RECORD = 2e-6
# The least solve worth building the whole model for, in multiples of its build
# time: an exact model pays only near its proof (1.4 s at 256 nodes and 100 jobs on
# the benchmark machine), a pruned model (more than EXACT_PAIRS pairs, counted as
# EXACT_PAIRS) competes on admissions; a shorter solve rarely beats LNS
SOLVE_TIMES_EXACT = 15.0
SOLVE_TIMES_PRUNED = 20 / 3


def build_fixed_s() -> float:
    """BUILD_FIXED_S on this machine (scaled by the speed factor; builds are timed
    only with a wall clock)."""
    return scaled(BUILD_FIXED_S)


def reserve_margin_s(deterministic: bool = False) -> float:
    """RESERVE_MARGIN_S on this machine (scaled by the speed factor; as is in
    deterministic mode)."""
    return scaled(RESERVE_MARGIN_S, deterministic)


def smoothed(last: float, new: float, first: float) -> float:
    """The next estimate of a time measured again: the mean of the last estimate and
    the new measurement, taken within 4 times the first estimate either way (one
    slow run on a busy machine does not make every later run look unaffordable)."""
    return (last + min(max(new, first / 4), 4 * first)) / 2


class Rates:
    """What the whole model and an LNS round cost on this machine, measured across
    the calls of this process (:func:`smoothed`; before the first measurement, the
    benchmark machine's time scaled by the speed factor, planner/solver/speed.py):
    the whole model's build time per pair (``build_pair_s``), at each build of at
    least MEASURE_PAIRS pairs outside deterministic mode (where no step looks at the
    clock), and a whole LNS round's wall time (``lns_round_s``: its cut, build,
    solve of round_s() and merge), at each LNS run with whole rounds. None: not
    measured yet."""

    def __init__(self) -> None:
        self.build_pair_s: float | None = None
        self.lns_round_s: float | None = None

    def pair_s(self) -> float:
        """The whole model's build time per pair: measured, else BUILD_PAIR_S scaled."""
        return scaled(BUILD_PAIR_S) if self.build_pair_s is None else self.build_pair_s

    @property
    def speed(self) -> float:
        """This machine's time for the same work, relative to the benchmark machine's."""
        return self.pair_s() / BUILD_PAIR_S

    def measured_build(self, pairs: int, seconds: float) -> None:
        """A whole-model build of ``pairs`` pairs took ``seconds``."""
        counted = min(pairs, EXACT_PAIRS)
        if counted >= MEASURE_PAIRS:
            rate = max(0.0, seconds - build_fixed_s()) / counted
            self.build_pair_s = smoothed(self.pair_s(), rate, scaled(BUILD_PAIR_S))

    def round_s(self) -> float:
        """A whole LNS round's wall time: measured, else round_s() (its CP-SAT time)."""
        return round_s() if self.lns_round_s is None else self.lns_round_s

    def measured_rounds(self, seconds: float) -> None:
        """The whole rounds of an LNS run took ``seconds`` each (their mean)."""
        self.lns_round_s = smoothed(self.round_s(), seconds, round_s())

    def build_s(self, pairs: int) -> float:
        """The whole model's build: the time per pair up to EXACT_PAIRS, plus
        build_fixed_s()."""
        return self.pair_s() * min(pairs, EXACT_PAIRS) + build_fixed_s()

    def full_solve_s(self, pairs: int) -> float:
        """The least solve worth building the whole model for (SOLVE_TIMES_*)."""
        if pairs <= EXACT_PAIRS:
            return SOLVE_TIMES_EXACT * self.pair_s() * pairs
        return SOLVE_TIMES_PRUNED * self.pair_s() * EXACT_PAIRS

    def reserve_s(self, problem: Problem, time_limit_s: float,
                  deterministic: bool = False) -> float:
        """Time kept for extraction, assembly, explanations and the verifier: 5% of
        the budget and reserve_margin_s() as margin, plus what they take, which grows less than
        linearly with pending jobs x nodes: 0.15 us per pair, at most 0.05 s x (pairs /
        500,000) ** 0.65 on big clusters (measured on the benchmark machine with the
        garbage collector paused, assembly, verifier and thrash.exempt_free_first of
        whole plans: 0.06 s at 500 x 1,024, 0.3 s at 2,000 x 4,096, 1.4-2 s at 5,000 x
        12,500, where plans cut short by the time limit take less), and freeing what
        the tick built (FREE_S_PER_RECORD), times this machine's ``speed`` (1 in
        deterministic mode, whose budget has no deadline to keep it from)."""
        pairs = len(problem.pending) * len(problem.nodes)
        work = min(1.5e-7 * pairs, 0.05 * (pairs / 500_000) ** 0.65)
        work += FREE_S_PER_RECORD * (len(problem.running) + len(problem.pending)
                                     + len(problem.nodes))
        return (0.05 * time_limit_s + reserve_margin_s(deterministic)
                + (1.0 if deterministic else self.speed) * work)


RATES = Rates()  # measured across the calls of this process


@dataclass
class Pace:
    """Times measured in this call: one greedy run (``greedy_s``, the first greedy
    plan's time); the problem's size in (job, candidate node) pairs, and whether
    LNS has rounds to run on it."""

    pairs: int
    greedy_s: float = 0.0
    rates: Rates = field(default_factory=lambda: RATES)
    lns_rounds: bool = True  # LNS has rounds to run (more than one neighbourhood)
    usable: int = 0  # usable nodes (the build's least, BUILD_NODE_S each)

    def model_s(self, *, measured: bool = True) -> float:
        """Time to build the whole model and solve it long enough to be worth it: a
        solve shorter than the build, than 2 x min_solve_s() or than the full solve
        (dropped where LNS has no rounds to run: there the model is the only
        search) is not. The build takes at least twice a greedy run, plus
        build_fixed_s() (``measured``: once a greedy run is)."""
        build = self.build_s(measured=measured)
        full = self.rates.full_solve_s(self.pairs) if self.lns_rounds else 0.0
        return build + max(build, 2 * min_solve_s(), full)

    def build_s(self, *, measured: bool = True) -> float:
        """Time to build the whole model (model_s())."""
        build = max(self.rates.build_s(self.pairs), scaled(BUILD_NODE_S) * self.usable)
        if measured:
            build = max(2 * self.greedy_s + build_fixed_s(), build)
        return build


def also(*said: str) -> str:
    """What was done, for solver.detail: the non-empty parts, comma-separated."""
    return ", ".join(x for x in said if x)


def moved(ejected: int, swaps: int) -> str:
    """What ejection and priority swaps did, for solver.detail."""
    return also(f"{ejected} job(s) admitted by ejection moves" if ejected else "",
                 f"{swaps} priority swap(s)" if swaps else "")


def eject_deadline(now: float, end: float, late: float) -> float:
    """When ejection moves called at ``now`` stop: at ``end``, which leaves the last
    polishing pass (moves to cheaper victims) CHEAPER_TIMES x the first passes' time
    before ``late``, but never before EJECT_LEAST_SHARE of the time left until
    ``late``. Admitted GPUs rank before the cost that pass saves: when the first
    passes are slow (a busy machine), that pass's share must not leave ejection
    almost nothing (docs/planner.md, section 2b)."""
    return max(end, now + EJECT_LEAST_SHARE * (late - now))


class Strategy:
    """A way to get a plan: see the module docstring."""

    name = ""
    keeps = "better"
    said = ""  # what it did, for solver.detail (after run)
    second = ""  # said of a plan that comes from a squeaky-wheel pass
    # pending jobs its run did not reach before its budget ended, and those it let
    # take only free GPUs (a greedy run's, GreedyPlanner.solve; a squeaky-wheel pass
    # runs only with three times its time left and is not counted)
    unreached: frozenset[str] = frozenset()
    free_only: frozenset[str] = frozenset()

    def estimate_s(self, pace: Pace) -> float:
        """The time it takes, or the least worth giving it (0: a pass that stops at
        its budget's end and takes little time when the plan leaves it little to do)."""
        return 0.0

    def run(self, problem: Problem, budget: Budget) -> Decision:
        raise NotImplementedError


class Greedy(Strategy):
    """A greedy variant (planner/heuristics/greedy.py) by its settings; ``planner``
    then says what its limits refused."""

    def __init__(self, settings: dict[str, Any], runs: float | None = None,
                 quick: float = 0.0, least: float = 0.0,
                 later: CutKeep | None = None,
                 free_first: bool = False, search_s: float = 0.0):
        self.settings = settings
        self.name = f"greedy {settings}"
        self.runs = runs  # its cost in greedy runs (None: VARIANT_RUN)
        # GreedyPlanner.solve's
        self.quick, self.least, self.later, self.free_first = quick, least, later, free_first
        self.search_s = search_s
        self.planner: GreedyPlanner | None = None

    def estimate_s(self, pace: Pace) -> float:
        return (VARIANT_RUN if self.runs is None else self.runs) * pace.greedy_s

    def run(self, problem: Problem, budget: Budget) -> Decision:
        # a variant places the gangs a packing of the first tier chose first
        # (planner/solver/packing.py); the plain plan (no settings) is the greedy
        # baseline's
        settings = ({**self.settings, "first": problem.packed}
                    if self.settings and problem.packed else self.settings)
        self.planner = GreedyPlanner(problem, **settings)
        d = clean(problem, self.planner.solve(budget, self.quick, self.least, self.later,
                                              self.free_first, self.search_s))
        self.unreached = frozenset(self.planner.unreached)
        self.free_only = frozenset(self.planner.free_only)
        return d


def plain_greedy(problem: Problem) -> Decision:
    """The plain greedy plan (the greedy baseline's), cleaned."""
    return clean(problem, GreedyPlanner(problem).solve())


def floor_and_bound(problem: Problem, budget: Budget | None
                    ) -> Iterator[Decision | BoundResult]:
    """FloorLane's child: the plain greedy plan, then, with a ``budget`` where the
    tier items' bound (bound.prove_tiers) applies and is expected to fit what is left
    of it, that bound for the plan, proved within it past the first item the plan
    does not reach (``through``: it bounds the plan returned, which often reaches
    more than the plain plan, as one proved for that plan would)."""
    d = plain_greedy(problem)
    yield d
    if budget is not None and tiers_apply(problem) and budget.fits(tiers_s(problem)):
        yield prove_tiers(problem, d, budget, through=True)


class FloorLane(Strategy):
    """The plain greedy plan, the floor of every plan (cpsat.py, ``candidates``), made
    in a second lane (planner/solver/lanes.py) started before the first greedy plan,
    so that on a big cluster the two greedy runs take one run's time side by side.
    :meth:`run` waits for the child at most ``wait_s`` (set to the first greedy plan's
    time: the plain plan takes less), and not past the end of its budget, and makes
    the plan itself (up to the end of the budget) when the child gave none, so the
    plan is the same either way when there is time for it. Started with a budget
    (``start``), the child then proves the tier items' bound for its plan
    (bound.prove_tiers) within it, while this lane goes on: :meth:`proof` collects it,
    :meth:`no_proof` stops it where another lane is to have the other core."""

    name = "greedy {} (second lane)"

    def __init__(self) -> None:
        self.lane: Lane | None = None
        self.wait_s = 0.0
        self.error = ""
        self.plan: Decision | None = None  # the child's plan, once collected
        self.proving = False  # the child may still give a bound (proof())

    def start(self, problem: Problem, budget: Budget | None = None) -> bool:
        """Fork the child, to prove the tier items' bound within ``budget`` less
        lanes.grace_s() after its plan where one is given; False if no process is to be
        had."""
        within = None if budget is None else budget.less(lane_grace_s())
        try:
            self.lane = Lane(floor_and_bound, problem, within)
        except OSError:
            return False
        self.proving = within is not None
        return True

    def run(self, problem: Problem, budget: Budget) -> Decision:
        assert self.lane is not None
        d = self.lane.result(Budget(min(self.wait_s, max(0.0, budget.left()))),
                             more=self.proving)
        if d is None:
            self.proving = False
            self.error = self.lane.error or "no answer"
            if budget.expired():  # (no time to make it: nothing reached)
                self.unreached = frozenset(j for j, i in problem.pending.items()
                                           if i.candidates and i.held_until is None)
                return Decision()
            planner = GreedyPlanner(problem)
            d = clean(problem, planner.solve(budget))
            self.unreached = frozenset(planner.unreached)
        self.plan = d
        return cast(Decision, d)

    @property
    def pending(self) -> bool:
        """Is the child's bound still to be collected (:meth:`proof`)?"""
        return self.lane is not None and self.proving

    def _past_plan(self, budget: Budget) -> bool:
        """The child's plan read where :meth:`run` did not (a run cut short wants
        none; the bound comes after it), if it comes by the end of ``budget``."""
        if self.plan is None:
            assert self.lane is not None
            d = self.lane.result(budget, more=True)
            if d is None:
                self.proving = False
                return False
            self.plan = d
        return True

    def ready(self) -> bool:
        """Has the child's bound come (or the child ended), so that :meth:`proof`
        would not wait? False where none is to be collected."""
        if not self.pending:
            return False
        assert self.lane is not None
        if self.plan is None and not (self.lane.ready() and self._past_plan(Budget(0.0))):
            return False
        return self.lane.ready()

    def no_proof(self) -> None:
        """No bound from the child: it stops after its plan, or now where that came."""
        if self.lane is None or not self.proving:
            return
        self.proving = False
        if self.plan is None:
            self.lane.stop()
        else:
            self.lane.close()

    def proof(self, budget: Budget) -> BoundResult | None:
        """The child's bound for its plan, if it comes by the end of ``budget`` less
        lanes.grace_s(); None if none was to come or it did not."""
        within = budget.less(lane_grace_s())
        if not self.pending or not self._past_plan(within):
            return None
        assert self.lane is not None
        self.proving = False
        return cast(BoundResult | None, self.lane.result(within))


class Carried(Strategy):
    """The last tick's plan, where nothing it rests on changed (a loop's hint:
    planner/core/decision.py, ``carried``)."""

    name = "the last tick's plan"

    def __init__(self, d: Decision):
        self.d = d

    def run(self, problem: Problem, budget: Budget) -> Decision:
        return self.d


class Baseline(Strategy):
    """A baseline's plan (planner/heuristics/baselines.py) by its name."""

    def __init__(self, name: str):
        self.name = name

    def estimate_s(self, pace: Pace) -> float:
        return BASELINE_RUNS[self.name] * pace.greedy_s

    def run(self, problem: Problem, budget: Budget) -> Decision:
        return clean(problem, get_baseline(self.name)(problem).solve())


class Squeaky(Strategy):
    """A greedy variant once more, with the jobs its plan ``start`` deferred first
    in their tier (greedy.py's squeaky_wheel)."""

    second = " (a second pass, deferred jobs first)"

    def __init__(self, settings: dict[str, Any], start: Decision):
        self.name = f"squeaky wheel {settings}"
        self.settings, self.start = settings, start

    def estimate_s(self, pace: Pace) -> float:
        return pace.greedy_s

    def run(self, problem: Problem, budget: Budget) -> Decision:
        # a variant that takes its tiers' jobs largest first places the gangs the
        # packing chose first too (in the priority order they do worse there)
        also = (problem.packed if self.settings
                and self.settings.get("order", "size") == "size" else frozenset())
        return squeaky_wheel(problem, self.start, budget=budget, also=also, **self.settings)


class Polish(Strategy):
    """Polishing (planner/heuristics/repack.py) of ``start``: repacking, moves to idle
    GPUs and, with ``cheaper``, moves to cheaper victims (the slowest pass);
    ``took`` is its time."""

    keeps = "always"

    def __init__(self, start: Decision, *, cheaper: bool = True):
        self.name = "polishing" if cheaper else "repacking and relocation"
        self.start, self.cheaper = start, cheaper
        self.took = 0.0

    def run(self, problem: Problem, budget: Budget) -> Decision:
        t = time.perf_counter()
        d, self.said = polish(problem, self.start, budget, cheaper=self.cheaper)
        self.took = time.perf_counter() - t
        return d


class Cheaper(Strategy):
    """Moves to cheaper victims (the last polishing pass) of ``start``."""

    keeps = "always"
    name = "cheaper victims"

    def __init__(self, start: Decision):
        self.start = start

    def run(self, problem: Problem, budget: Budget) -> Decision:
        d, self.said = cheaper_victims(problem, self.start, budget)
        return d


class Eject(Strategy):
    """Ejection moves, then priority swaps (planner/heuristics/eject.py), on ``start``:
    until the budget's end, of which the swaps get what ejection leaves (it stops
    early after a round that admits nothing; admitted GPUs rank first), or in
    deterministic mode EJECT_TRIES tries each. ``ejected``, ``swaps``: how many.
    ``traded``: ejection compares plans after ``thrash.exempt_free_first`` (for a
    planner that keeps plans after it), and the swaps are kept only where the plan
    they give ranks as high once traded as the ejection's (a swap the trade undoes
    would otherwise take the ejection's gains with it). ``swaps_by``: the swaps stop
    there when it comes before the budget's end. ``origin``: the strategy whose plan
    ``start`` is, where that is not the plan ranked first so far; the result then
    competes as a candidate's plan does (``keeps`` "as good")."""

    keeps = "always"
    name = "ejection moves"

    def __init__(self, start: Decision, *, traded: bool = False,
                 swaps_by: Budget | None = None, origin: Strategy | None = None):
        self.start, self.traded, self.swaps_by = start, traded, swaps_by
        self.ejected = self.swaps = 0
        self.origin = origin
        if origin is not None:
            self.keeps = "as good"
            # (the jobs the run that made ``start`` did not reach stay unreached)
            self.unreached, self.free_only = origin.unreached, origin.free_only

    def run(self, problem: Problem, budget: Budget) -> Decision:
        d = self.start
        if budget.wall:
            d, self.ejected = eject(problem, d, budget=budget, traded=self.traded)
            by = budget if self.swaps_by is None else budget.until(self.swaps_by.end)
            up, self.swaps = upgrade(problem, d, budget=by, speed=factor())
        else:
            d, self.ejected = eject(problem, d, tries=EJECT_TRIES, traded=self.traded)
            up, self.swaps = upgrade(problem, d, tries=EJECT_TRIES)
        if self.swaps and self.traded:
            traded_up = after_trade(problem, up)[0]
            if objective_of(problem, traded_up).key() < objective_of(problem, d).key():
                up, self.swaps = d, 0
        self.said = moved(self.ejected, self.swaps)
        if self.said and self.origin is not None:
            self.said += " on the best greedy variant's plan"
        return up


class Lns(Strategy):
    """Large-neighbourhood search (planner/solver/lns.py) from the greedy plan ``start``
    relocated but not repacked, its rounds until the budget's end, its result then
    polished by ``polish_by``. Its plan when the rounds improved it and it ranks
    higher than ``incumbent`` (then ``rounds`` is (rounds that improved, rounds)),
    else ``incumbent`` (``said`` then says what the rounds found). ``whole``: the
    whole rounds it needs to be worth running; their time is measured (Rates)."""

    name = "LNS"

    def __init__(self, start: Decision, incumbent: Decision, polish_by: Budget, *,
                 workers: int, seed: int, whole: int):
        self.start, self.incumbent, self.polish_by = start, incumbent, polish_by
        self.workers, self.seed, self.whole = workers, seed, whole
        self.rounds: tuple[int, int] | None = None

    def estimate_s(self, pace: Pace) -> float:
        return self.whole * pace.rates.round_s()

    def run(self, problem: Problem, budget: Budget) -> Decision:
        assert budget.wall  # (LNS runs only with a wall clock)
        start, _moves = relocate(problem, self.start, budget)
        res = improve(problem, start, budget, workers=self.workers, seed=self.seed,
                      speed=RATES.speed)
        if res.whole_round_s is not None:
            RATES.measured_rounds(res.whole_round_s)
        d, more = polish(problem, res.decision, self.polish_by, cheaper=False)
        if res.improved and (objective_of(problem, d).key()
                             > objective_of(problem, self.incumbent).key()):
            self.rounds, self.said = (res.improved, res.rounds), more
            return d
        self.said = (f"{res.rounds} neighbourhood round(s) found nothing better"
                     + (" than polishing" if res.improved else ""))
        return self.incumbent


class WholeModel(Strategy):
    """The whole CP-SAT model (planner/solver/model.py), hinted with ``hint``: built by
    min_solve_s() before the budget's end (else ``timed_out``), then solved in
    lexicographic phases in what is left (in deterministic mode its whole length,
    as a deterministic time). The best phase's plan, or ``hint``."""

    keeps = "as good"
    name = "whole model"

    def __init__(self, hint: Decision, keep_nodes: dict[str, frozenset[int]], *,
                 factor: int, deterministic: bool, workers: int, seed: int, log: bool):
        self.hint, self.keep_nodes, self.factor = hint, keep_nodes, factor
        self.deterministic, self.workers, self.seed, self.log = deterministic, workers, seed, log
        self.timed_out = False
        self.model: CpsatModel | None = None
        self.result: PhaseResult | None = None
        self.built_at = 0.0  # seconds into the budget when the build ended

    def estimate_s(self, pace: Pace) -> float:
        return pace.model_s()

    def run(self, problem: Problem, budget: Budget) -> Decision:
        t = time.perf_counter()
        try:
            self.model = CpsatModel(problem, candidate_factor=self.factor,
                                    keep_nodes=self.keep_nodes,
                                    budget=budget.less(min_solve_s(self.deterministic)))
        except BuildTimeout:
            self.timed_out = True
            return self.hint
        if not self.deterministic:
            RATES.measured_build(sum(len(i.candidates) for i in problem.pending.values()
                                     if i.held_until is None), time.perf_counter() - t)
        self.built_at = budget.elapsed()
        if not self.model.classes:
            return self.hint
        self.result = run_phases(self.model, self.hint, budget,
                                 deterministic=self.deterministic, workers=self.workers,
                                 seed=self.seed, log=self.log,
                                 speed=1.0 if self.deterministic else RATES.speed)
        return self.result.best if self.result.best is not None else self.hint


def lane_runs(candidate: dict | str) -> float:
    """What a second-lane candidate costs, in greedy runs."""
    return BASELINE_RUNS[candidate] if isinstance(candidate, str) else VARIANT_RUN


def candidate(kw: dict | str) -> Greedy | Baseline:
    """A greedy variant by its settings, or a baseline by its name."""
    return Baseline(kw) if isinstance(kw, str) else Greedy(kw)


def second_lane(problem: Problem, candidates: list[dict | str], first_s: float | None,
                budget: Budget, traded: bool = False, bound: bool = False,
                hint: Decision | None = None
                ) -> tuple[Decision, str, BoundResult | None] | None:
    """The second lane's plan (planner/solver/lanes.py, in a child process) and what it
    says: the ``candidates`` in order (greedy variants by their settings, baselines
    by name), each while its greedy runs (``first_s`` each, lane_runs) fit in
    SQUEAKY_SHARE of the time left (the first while it fits at all), and the
    squeaky-wheel pass of each variant's plan better than those before it, while a
    greedy run fits in SQUEAKY_SHARE of the time left; then, on the best plan,
    polishing, ejection moves and moves to cheaper victims, as on the first lane,
    all within ``budget``. None if no candidate fits. ``first_s`` None (the early lane):
    the first candidate always runs, and its time sets the pace of the others. With
    ``bound``, the tier items' bound (bound.prove_tiers) for the lane's plan comes
    before the moves to cheaper victims (which rank after every admission), its time
    kept from the ejection moves: the plan, what it says, and that bound or None.
    With ``hint`` too (the first lane's plan, where the baselines come first and
    take most of the lane), the bound is proved after the first candidate as well,
    for the better of ``hint`` and the lane's plan then, and the later bound is kept
    where it reaches at least as many items."""
    best: Decision | None = None
    key: tuple = ()
    what = ""  # which plan is the best, for solver.detail
    proof = None
    for kw in candidates:
        if (bound and hint is not None and best is not None and proof is None
                and tiers_apply(problem) and budget.fits(tiers_s(problem))):
            # (after the first candidate, for the better plan: the bound holds the tiers
            # before the first item that plan does not reach)
            proof = prove_tiers(problem, hint if objective_of(problem, hint).key() > key
                                else best, budget)
        if first_s is not None and lane_runs(kw) * first_s > (
                SQUEAKY_SHARE * budget.left() if best is not None else budget.left()):
            break
        tc = time.perf_counter()
        s = candidate(kw)
        d = s.run(problem, budget)
        if first_s is None:
            first_s = (time.perf_counter() - tc) / lane_runs(kw)
        k = objective_of(problem, d).key()
        if best is not None and k <= key:
            continue
        best, key, what = d, k, (f"plan (the {BASELINE_NAMES[kw]} baseline's)"
                                 if isinstance(kw, str) else "greedy plan")
        if isinstance(kw, dict) and first_s <= SQUEAKY_SHARE * budget.left():
            again = Squeaky(kw, d).run(problem, budget)
            k = objective_of(problem, again).key()
            if k > key:
                best, key, what = again, k, "greedy plan (a second pass, deferred jobs first)"
    if best is None:
        return None
    first = Polish(best, cheaper=False)
    best = first.run(problem, budget)
    proving = bound and tiers_apply(problem)
    need = tiers_s(problem) if proving else 0.0
    # (the bound's time, with a margin, from the ejection moves)
    end = budget.less(CHEAPER_TIMES * first.took + TIERS_KEEP_TIMES * need)
    ejection = Eject(best, traded=traded)
    best = ejection.run(problem, budget.until(
        eject_deadline(time.perf_counter(), end.end, budget.end)))
    if proving and budget.fits(need):
        later = prove_tiers(problem, best, budget)
        if proof is None or len(later.items) >= len(proof.items):
            proof = later
    last = Cheaper(best)
    best = last.run(problem, budget)
    after = also(first.said, ejection.said, last.said)
    return best, (f"the second lane's {what}, better, returned"
                  + (f" after {after}" if after else "")), proof


def _prove_through(problem: Problem, d: Decision, budget: Budget) -> BoundResult:
    """BoundLane's child: prove(through=True), with the tier items' bound
    (prove_tiers) first where it applies and is expected to leave the relaxation its
    build and a solve (on the 4,096-node benchmark tick at 5 s the relaxation's phase
    stopped in time once gave tier 2 at most 5,929 GPUs, the tier items' bound 1,313):
    the tighter of the two (bound.tighter)."""
    cheap = None
    if tiers_apply(problem) and budget.fits(
            tiers_s(problem) + relaxation_s(problem) + min_solve_s()):
        cheap = prove_tiers(problem, d, budget)
    full = prove(problem, d, budget, through=True)
    return full if cheap is None else tighter(full, cheap)


class BoundLane:
    """A proven bound (planner/solver/bound.py) for the plan ``hint``, proved in a second
    lane (planner/solver/lanes.py) while this one goes on: where the whole model is
    skipped and no second lane runs (cpsat.py, ``without_model``)."""

    def __init__(self, hint: Decision):
        self.hint = hint
        self.lane: Lane | None = None
        # the child solves the whole relaxation (it holds the other core a good while),
        # not the tier items' bound alone (a few tenths of a second at most)
        self.whole = False

    def start(self, problem: Problem, budget: Budget) -> bool:
        """Fork the child, to end by the budget's end less lanes.grace_s(), where the
        relaxation's build is expected to leave it time to solve, else where the tier
        items' bound (bound.prove_tiers) applies and is expected to fit; False if
        neither or no process is to be had."""
        within = budget.less(lane_grace_s())
        if within.expired():  # (no time for either: the estimates below pass over the
            return False  # problem, 0.01 s at 12,500 nodes)
        self.whole = self.whole_fits(problem, budget)
        if self.whole:
            fn: Any = _prove_through
        elif tiers_apply(problem) and within.fits(tiers_s(problem)):
            fn = prove_tiers
        else:
            return False
        try:
            self.lane = Lane(fn, problem, self.hint, within)
        except OSError:
            return False
        return True

    @staticmethod
    def whole_fits(problem: Problem, budget: Budget) -> bool:
        """Would the child solve the whole relaxation within ``budget`` (start)?"""
        within = budget.less(lane_grace_s())
        return not within.expired() and within.fits(relaxation_s(problem) + min_solve_s())

    def result(self, budget: Budget) -> BoundResult | None:
        """The bound, if it comes by the end of ``budget`` less lanes.grace_s()."""
        if self.lane is None:
            return None
        return cast(BoundResult | None, self.lane.result(budget.less(lane_grace_s())))


class SecondLane(Strategy):
    """The second lane (planner/solver/lanes.py): ``second_lane`` on ``candidates`` in a
    child process, started by :meth:`start`, ending lanes.grace_s() before the budget
    :meth:`run` waits in. Its plan (``said`` says which), or ``fallback`` (the plan
    so far, set before it runs) when it gave none (``error`` says why). ``traded``:
    its ejection moves compare plans after ``thrash.exempt_free_first`` (Eject). It
    proves the tier items' bound too (second_lane's ``bound``): ``proof``."""

    name = "second lane"

    def __init__(self, candidates: list[dict | str], first_s: float | None, *,
                 traded: bool = False, hint: Decision | None = None):
        self.candidates, self.first_s, self.traded = candidates, first_s, traded
        self.hint = hint  # (second_lane's)
        self.lane: Any = None
        self.error = ""
        self.fallback = Decision()
        self.proof: BoundResult | None = None  # the tier items' bound (after run)

    def estimate_s(self, pace: Pace) -> float:
        return lane_runs(self.candidates[0]) * pace.greedy_s

    def start(self, problem: Problem, budget: Budget) -> bool:
        """Fork the child, to end by the budget's end less lanes.grace_s(); False if no
        process is to be had (then the planner plans in one lane)."""
        assert budget.wall  # (a second lane needs a wall clock)
        try:
            self.lane = Lane(second_lane, problem, self.candidates, self.first_s,
                             budget.less(lane_grace_s()), self.traded, True, self.hint)
        except OSError:
            return False
        return True

    def close(self) -> None:
        self.lane.close()

    def run(self, problem: Problem, budget: Budget) -> Decision:
        other = self.lane.result(budget.less(lane_grace_s()))
        if other is None:
            self.error = self.lane.error or "no time for one more greedy run"
            return self.fallback
        d, self.said, self.proof = other
        return d
