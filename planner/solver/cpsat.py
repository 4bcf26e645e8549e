"""One planning tick with CP-SAT and the heuristics around it: :func:`solve_cpsat`.

The greedy variants (planner/heuristics/greedy.py) and the baselines give the hint and the
fallback; polishing (planner/heuristics/repack.py), ejection moves and priority swaps
(planner/heuristics/eject.py) improve them, and a second lane (planner/solver/lanes.py) runs more of
them on another core. Then, as the budget allows, the whole CP-SAT model
(planner/solver/model.py) is built and solved in lexicographic phases, or large-
neighbourhood search (planner/solver/lns.py) improves the plan one part of the cluster at
a time. The best plan of all is assembled (planner/checks/assemble.py): never worse than
the greedy plans (docs/planner.md, sections 2-3).
"""

from __future__ import annotations

import time

from models import Plan, SolverInfo
from planner.checks.assemble import assemble
from planner.core.decision import Decision, clean, objective_of
from planner.core.problem import Problem
from planner.heuristics.baselines import get_baseline
from planner.heuristics.eject import eject, upgrade
from planner.heuristics.greedy import GreedyPlanner, squeaky_wheel
from planner.heuristics.repack import cheaper_victims, polish, relocate
from planner.solver.lanes import GRACE_S as LANE_GRACE_S
from planner.solver.lanes import Lane
from planner.solver.lanes import available as lanes_available
from planner.solver.lns import NEIGHBOURHOOD_NODES, ROUND_S, improve, neighbourhoods
from planner.solver.model import MIN_SOLVE_S, BuildTimeout, CpsatModel, run_phases

EXACT_PAIRS = 60_000  # (pending job, candidate node) pairs up to which nothing is pruned
STORM_PRICE = 1e4  # GPU-s per GB flushed, in the storm-aware greedy variant
LNS_MIN_S = 0.15  # least time left for neighbourhood rounds when the whole model is skipped
# least solve time, per (job, candidate node) pair, for which the whole model is built
# rather than neighbourhoods (planner/solver/lns.py): a shorter solve of the whole model
# rarely beats LNS. An exact model pays only near its proof; a pruned model (more than
# EXACT_PAIRS pairs) competes on admissions and is counted as EXACT_PAIRS pairs.
# Calibrated on the benchmark machine (docs/benchmarks.md)
FULL_SOLVE_PER_PAIR_S = 4e-5
FULL_SOLVE_EXACT_PER_PAIR_S = 9e-5
# time kept for the last polishing pass (moves to cheaper victims, planner/heuristics/repack.py),
# in multiples of the first two passes' time: measured 3-5x on the benchmark
# clusters (0.006 s at 256 nodes, 0.06 s at 1,024, 0.25-0.37 s at 4,096); the pass
# stops at its deadline, largest savings first
CHEAPER_TIMES = 4.0
# the squeaky-wheel re-run of the greedy plan runs on clusters of more usable nodes
# than this many LNS neighbourhoods (planner/solver/lns.py), when one greedy run takes at
# most this share of the time left to improve the plan (at 3,072-4,096 nodes and 5 s
# that decides run by run; docs/planner.md, section 2)
SQUEAKY_NEIGHBOURHOODS = 4
SQUEAKY_SHARE = 1 / 3
# the k8s and slurm baselines' plans are candidates when an eviction budget bound, each
# when the time left holds this many greedy runs (one costs 0.5-1.7 greedy runs at
# 512-1,024 nodes on the benchmark machine); the k8s one runs right after the first
# greedy plan, the slurm one last
BASELINE_RUN = 1.5
# settings of the greedy variant that takes the more important jobs of a tier first
PRIORITY_FIRST = {"spare_lower": True, "order": "priority"}
# the early lane's candidates, in order (_early_lane)
EARLY_LANE: tuple[dict | str, ...] = ("k8s", "slurm", PRIORITY_FIRST)
# optional candidates (that variant, and the baselines when no eviction budget bound)
# run with a wall-clock budget when they take at most this share of the time left to
# improve the plan, and leave one whole LNS round (ROUND_S) where LNS has rounds to
# run: at 256 nodes and 0.3 s the round that finds the optimum's admissions needs all
# of it, and at 1,024 nodes and 1 s the squeaky-wheel passes do (docs/planner.md,
# section 2)
EXTRA_SHARE = 0.15
BASELINE_NAMES = {"k8s": "Kubernetes-style", "slurm": "Slurm-style"}
# ejection moves (planner/heuristics/eject.py) on the plan to return: this share of the time left
# for LNS is kept for them (they also get what LNS leaves), and in deterministic mode
# they stop after EJECT_TRIES tried moves (docs/planner.md, section 2b)
EJECT_SHARE = 0.1
EJECT_TRIES = 1000
# ... and at least this share of the time left until the last polishing pass must end
# (see eject_deadline)
EJECT_LEAST_SHARE = 0.5




def eject_deadline(now: float, end: float, late: float) -> float:
    """When ejection moves called at ``now`` stop: at ``end``, which leaves the last
    polishing pass (moves to cheaper victims) CHEAPER_TIMES x the first passes' time
    before ``late``, but never before EJECT_LEAST_SHARE of the time left until
    ``late``. Admitted GPUs rank before the cost that pass saves: when the first
    passes are slow (a busy machine), that pass's share must not leave ejection
    almost nothing (docs/planner.md, section 2b)."""
    return max(end, now + EJECT_LEAST_SHARE * (late - now))


def eject_and_upgrade(problem: Problem, d: Decision, limit: dict[str, float]
                      ) -> tuple[Decision, int, int]:
    """Ejection moves, then priority swaps (planner/heuristics/eject.py), within ``limit``: a
    deadline, of which the swaps get what ejection leaves (it stops early after a
    round that admits nothing; admitted GPUs rank first: with the last 20% kept for
    the swaps, on 36 random clusters of 128-2,048 nodes, 8 plans lost 4-24 GPUs of a
    tier for 12 that gained priority value, docs/planner.md 2b), or in deterministic
    mode a number of tries for each. The plan, the jobs ejection admitted and the
    swaps made."""
    if "deadline" in limit:
        d, ejected = eject(problem, d, deadline=limit["deadline"])
        d, swaps = upgrade(problem, d, deadline=limit["deadline"])
    else:
        d, ejected = eject(problem, d, tries=int(limit["tries"]))
        d, swaps = upgrade(problem, d, tries=int(limit["tries"]))
    return d, ejected, swaps


def _moved(ejected: int, swaps: int) -> str:
    """What ejection and priority swaps did, for solver.detail."""
    return _also(f"{ejected} job(s) admitted by ejection moves" if ejected else "",
                 f"{swaps} priority swap(s)" if swaps else "")


def _reserve(problem: Problem, time_limit_s: float) -> float:
    """Time kept for extraction, assembly, explanations and the verifier. They grow
    less than linearly with pending jobs x nodes (measured with the garbage collector
    paused, benchmark machine: 0.10 s at 500 x 1,024, 0.15 s at 1,000 x 2,048,
    0.54-0.65 s at 2,000 x 4,096): 0.15 us per pair, at most 0.1 s x (pairs /
    500,000) ** 0.65 on big clusters, plus 5% of the budget and 20 ms as margin."""
    pairs = len(problem.pending) * len(problem.nodes)
    return 0.05 * time_limit_s + 0.02 + min(1.5e-7 * pairs, 0.1 * (pairs / 500_000) ** 0.65)


def _also(*said: str) -> str:
    """What was done, for solver.detail: the non-empty parts, comma-separated."""
    return ", ".join(x for x in said if x)


def _lane_runs(candidate: dict | str) -> float:
    """What a second-lane candidate costs, in greedy runs: 1.5 for a greedy variant
    (settings), BASELINE_RUN for a baseline (its name)."""
    return BASELINE_RUN if isinstance(candidate, str) else 1.5


def _second_lane(problem: Problem, candidates: list[dict | str], first_s: float | None,
                 late: float) -> tuple[Decision, str] | None:
    """The second lane's plan (planner/solver/lanes.py, in a child process) and what it says:
    the ``candidates`` in order (greedy variants by their settings, baselines by
    name), each while its greedy runs (``first_s`` each, _lane_runs) fit in
    SQUEAKY_SHARE of the time left (the first while it fits at all), and the
    squeaky-wheel pass of each variant's plan better than those before it, while a
    greedy run fits in SQUEAKY_SHARE of the time left; then, on the best plan,
    polishing, ejection moves and moves to cheaper victims, as on the first lane,
    all by ``late``. None if no candidate fits. ``first_s`` None (the early lane):
    the first candidate always runs, and its time sets the pace of the others."""
    best: Decision | None = None
    key: tuple = ()
    what = ""  # which plan is the best, for solver.detail
    for kw in candidates:
        left = late - time.perf_counter()
        if first_s is not None and _lane_runs(kw) * first_s > (
                SQUEAKY_SHARE * left if best is not None else left):
            break
        tc = time.perf_counter()
        if isinstance(kw, str):
            d = clean(problem, get_baseline(kw)(problem).solve())
        else:
            d = clean(problem, GreedyPlanner(problem, **kw).solve())
        if first_s is None:
            first_s = (time.perf_counter() - tc) / _lane_runs(kw)
        k = objective_of(problem, d).key()
        if best is not None and k <= key:
            continue
        best, key, what = d, k, (f"plan (the {BASELINE_NAMES[kw]} baseline's)"
                                 if isinstance(kw, str) else "greedy plan")
        if not isinstance(kw, str) and first_s <= SQUEAKY_SHARE * (late - time.perf_counter()):
            again = squeaky_wheel(problem, d, **kw)
            k = objective_of(problem, again).key()
            if k > key:
                best, key, what = again, k, "greedy plan (a second pass, deferred jobs first)"
    if best is None:
        return None
    tr = time.perf_counter()
    best, polished = polish(problem, best, late, cheaper=False)
    end = late - CHEAPER_TIMES * (time.perf_counter() - tr)
    best, ejected, swaps = eject_and_upgrade(
        problem, best, {"deadline": eject_deadline(time.perf_counter(), end, late)})
    best, cheaper = cheaper_victims(problem, best, late)
    after = _also(polished, _moved(ejected, swaps), cheaper)
    return best, (f"the second lane's {what}, better, returned"
                  + (f" after {after}" if after else ""))


def _pairs_build_s(n_pairs: int) -> float:
    """Building the model takes about 6 us per (job, candidate node) pair up to the
    pruning threshold, plus 10 ms (see solve_cpsat's ``build_est``)."""
    return 6e-6 * min(n_pairs, EXACT_PAIRS) + 0.01


def _full_solve_s(n_pairs: int) -> float:
    """The least solve worth building the whole model for (FULL_SOLVE_* per pair)."""
    return (FULL_SOLVE_EXACT_PER_PAIR_S * n_pairs if n_pairs <= EXACT_PAIRS
            else FULL_SOLVE_PER_PAIR_S * EXACT_PAIRS)


def _model_s(build_s: float, full_solve_s: float) -> float:
    """Time to build the whole model and solve it long enough to be worth it: a solve
    shorter than the build, than 2 x MIN_SOLVE_S or than ``full_solve_s`` is not."""
    return build_s + max(build_s, 2 * MIN_SOLVE_S, full_solve_s)


def _early_lane(problem: Problem, time_limit_s: float, reserve: float, usable: int,
                n_pairs: int, deterministic: bool, workers: int) -> bool:
    """Should the second lane start before the first greedy plan, with the per-node
    baselines first? Under an eviction budget (R13) they often admit far more than
    the greedy variants (a count budget spent on few victims per node), but near
    the floor neither lane had time for them after the first greedy plan (a
    1,536-node cluster at 0.5 s: 939 tier-1 GPUs against the Kubernetes-style
    baseline's 1,379). Only when the policy has a budget, the cluster is as big as
    for any second lane, lanes are available, and the whole model is out of reach
    even before the greedy plan's time is counted (:func:`solve_cpsat`'s ``short``
    without it: the model is then skipped for sure, and the lane's answer taken)."""
    pol = problem.policy
    if deterministic or (pol.max_evictions_per_tick is None
                         and pol.max_evicted_gpu_fraction is None):
        return False
    if usable <= SQUEAKY_NEIGHBOURHOODS * NEIGHBOURHOOD_NODES:
        return False
    need = _model_s(_pairs_build_s(n_pairs), _full_solve_s(n_pairs))
    return need > time_limit_s - reserve - MIN_SOLVE_S / 2 and lanes_available(workers)


def solve_cpsat(problem: Problem, *, time_limit_s: float = 1.0, deterministic: bool = False,
                workers: int = 2, seed: int = 0, log: bool = False, prune: bool = True) -> Plan:
    """Plan with CP-SAT. ``prune=False`` keeps every candidate node however big the
    cluster (for reference solves with long budgets; the default prunes above
    EXACT_PAIRS job x node pairs, and the plan is then at most ``feasible``)."""
    t0 = time.perf_counter()
    reserve = _reserve(problem, time_limit_s)
    usable = sum(1 for n in problem.nodes if n.usable)
    n_pairs = sum(len(i.candidates) for i in problem.pending.values() if i.held_until is None)
    # the child ends GRACE_S before the parent's last pass (late, below), and the
    # parent waits for it until then: its answer does not push the plan later
    lane_end = t0 + time_limit_s - reserve - LANE_GRACE_S
    lane = None  # the second lane (planner/solver/lanes.py), when it runs
    in_lane: tuple[dict | str, ...] = ()  # the early lane's candidates, when it runs
    if _early_lane(problem, time_limit_s, reserve, usable, n_pairs, deterministic, workers):
        try:
            lane = Lane(_second_lane, problem, list(EARLY_LANE), None, lane_end)
            in_lane = EARLY_LANE
        except OSError:  # no process to be had: one lane
            lane = None
    # hint and fallback: the greedy variant that spares capacity less important pending
    # jobs need (usually admits more), and the plain greedy plan (below); the better
    # is kept, so the result is never worse than either
    spare = GreedyPlanner(problem, spare_lower=True)
    greedy = clean(problem, spare.solve())
    first_s = time.perf_counter() - t0
    variants: list[dict] = []  # settings of the other greedy variants to run
    if deterministic:
        variants.append({})
    scored: dict[int, tuple[Decision, tuple]] = {}  # each greedy plan's objective key, once

    def score(d: Decision) -> tuple:
        hit = scored.get(id(d))
        if hit is None or hit[0] is not d:
            hit = scored[id(d)] = (d, objective_of(problem, d).key())
        return hit[1]

    plans = [greedy]
    second = ""  # said when the greedy plan comes from a squeaky-wheel pass

    def offer(d: Decision, said: str = "") -> None:
        """Keep ``d`` among the plans, and as the greedy plan if it is better."""
        nonlocal greedy, second
        plans.append(d)
        if score(d) > score(greedy):
            greedy, second = d, said

    baselines_ran: set[str] = set()  # the baselines whose plans were computed

    def baseline(name: str) -> Decision:
        """The plan of baseline ``name`` (planner/heuristics/baselines.py), noted as computed."""
        baselines_ran.add(name)
        return clean(problem, get_baseline(name)(problem).solve())

    # LNS has rounds to run only when the cluster is more than one neighbourhood
    lns_rounds = usable > NEIGHBOURHOOD_NODES or len(neighbourhoods(problem)) > 1

    def room(runs: float) -> bool:
        """Does the time left hold this many greedy runs, and the reserve?"""
        return deterministic or time.perf_counter() - t0 + runs * first_s + reserve < time_limit_s

    def affordable(runs: float) -> bool:
        """May an optional candidate of this many greedy runs run? At most EXTRA_SHARE
        of the time left to improve the plan, and (always in deterministic mode):
        where the whole model fits in the time left, while it still fits after the
        candidate; else leaving one whole LNS round where LNS has rounds to run, or
        time for a short solve of the whole model."""
        if deterministic:
            return True
        left = time_limit_s - reserve - (time.perf_counter() - t0)
        cost = runs * first_s
        if cost > EXTRA_SHARE * left:
            return False
        missing = short() or 0.0
        if lns_rounds and missing <= 0:
            # LNS will not run: a round's time kept for it would go unused, and the
            # optional candidates would not run
            # (test_the_baselines_are_candidates_when_the_whole_model_fits_in_a_short_budget)
            return missing + cost <= 0
        return left - cost >= (ROUND_S if lns_rounds else 2 * MIN_SOLVE_S)

    # the whole model must be built and solved for at least MIN_SOLVE_S within the
    # budget: how much time is missing for that (> 0: the model is skipped, below)
    deadline = None if deterministic else t0 + time_limit_s - reserve - MIN_SOLVE_S
    # building the model takes 2-6 times as long as the first greedy plan, or about
    # 6 us per (job, candidate node) pair up to the pruning threshold (256 to 4,096
    # nodes on the benchmark machine); a solve shorter than the build (or than
    # 2 x MIN_SOLVE_S, or than the FULL_SOLVE_* times per pair) rarely improves on the
    # greedy plan as much as LNS does: then the neighbourhoods get the time
    build_est = max(2 * first_s + 0.01, _pairs_build_s(n_pairs))
    full_solve = _full_solve_s(n_pairs)
    if not lns_rounds:
        # one neighbourhood: LNS has nothing to re-solve but this whole model, so any
        # time worth a solve goes to it, rather than return the greedy plan with most
        # of the budget unused
        full_solve = 0.0

    def short() -> float | None:
        """Seconds missing to build and solve the whole model (None: deterministic)."""
        if deadline is None:
            return None
        return (time.perf_counter() + _model_s(build_est, full_solve) - deadline
                - MIN_SOLVE_S / 2)

    if spare.budget_rejected and "k8s" not in in_lane and room(BASELINE_RUN):
        # an eviction budget (R13) refused victims: the per-node baselines, which take
        # the node with the fewest victims first, often admit more under a count
        # budget than the greedy variants, which take the cheapest victims first. The
        # Kubernetes-style one, more often the better of the two, comes before the
        # other variants whenever the time left holds it (not also the plain greedy
        # plan below, which runs anyway: reserving room for both leaves it, near the
        # floor, to the second lane, which may have no time for it either); the
        # Slurm-style one comes last
        offer(baseline("k8s"))
    storm_variants: list[dict] = []  # the storm-priced variants, when they run
    if spare.storm_rejected and room(1.5):
        # the storage limit refused victims: also try spending the storm budget on
        # victims with small checkpoints (often admits more, see docs/planner.md)
        # (priced only on the storage targets where the limit refused a victim)
        # (and the same without sparing free GPUs, optional: there a job that spares
        # them evicts instead, spending the storm budget its tier's other jobs need)
        storm = {"spare_lower": True, "storm_price": STORM_PRICE,
                 "priced": frozenset(spare.full_storages)}
        storm_variants = [storm, {**storm, "spare_free": False}]
        variants.append(storm)
        if affordable(1.5 * len(variants) + 1.5):  # (the variants queued, and this one)
            variants.append(storm_variants[1])
    if PRIORITY_FIRST not in in_lane and affordable(1.5 * len(variants) + 1.5):  # (as above)
        # the sparing variant in the baselines' queue order: more important jobs
        # first within a tier. Largest-first can give a big job the nodes that two
        # smaller jobs of its tier needed (docs/planner.md, section 2)
        variants.append(PRIORITY_FIRST)
    if (lane is None and not deterministic
            and usable > SQUEAKY_NEIGHBOURHOODS * NEIGHBOURHOOD_NODES
            and (short() or 0.0) > 0 and lanes_available(workers)):
        # the model will be skipped (the time missing only grows) and the plan is made
        # in Python, on one core: a second lane on the other core runs the other
        # variants too (also those this lane cannot afford), with their squeaky-wheel
        # passes, and ejection moves and polishing on its best plan; this lane goes on
        # as without it, and the better plan is returned (docs/planner.md, section 2c)
        # (the per-node baselines first when an eviction budget binds, the
        # Kubernetes-style one before the Slurm-style one as on this lane: fewest
        # victims first often spends a count budget better, and this lane often has
        # no time for them)
        todo: list[dict | str] = [*storm_variants, PRIORITY_FIRST]
        if spare.budget_rejected:
            todo = [*(["k8s"] if "k8s" not in baselines_ran else []), "slurm", *todo]
        if _lane_runs(todo[0]) * first_s <= lane_end - time.perf_counter():  # (as there)
            try:
                lane = Lane(_second_lane, problem, todo, first_s, lane_end)
            except OSError:  # no process to be had: one lane
                lane = None
    ran = [({"spare_lower": True}, plans[0])]  # (settings, plan) of each variant run
    for kw in variants:
        other = clean(problem, GreedyPlanner(problem, **kw).solve())
        ran.append((kw, other))
        offer(other)
    if usable > SQUEAKY_NEIGHBOURHOODS * NEIGHBOURHOOD_NODES:
        # squeaky wheel: each variant once more, best plan first, with the jobs it
        # deferred first in their tier (each tier still goes before the next). On a
        # cluster this big an LNS round sees a small part of it, and re-runs that leave
        # LNS most of its time often admit more (docs/planner.md, section 2)
        ran.sort(key=lambda r: score(r[1]), reverse=True)
        for kw, d in ran:
            left = time_limit_s - reserve - (time.perf_counter() - t0)  # to improve the plan
            if not (deterministic or first_s <= SQUEAKY_SHARE * left):
                break
            offer(squeaky_wheel(problem, d, **kw), " (a second pass, deferred jobs first)")
    if not deterministic:  # (deterministic mode ran it above, as one of the variants)
        # the plain greedy plan, which is the greedy baseline's, always, as a floor:
        # sparing capacity for less important jobs can cost a tier its own admissions
        # (a tier-1 gang takes the block another tier-1 job needed, to spare free
        # nodes for tier 3). It runs after them, so that the passes above keep their time.
        offer(clean(problem, GreedyPlanner(problem).solve()))
    if spare.budget_rejected:
        if "slurm" not in in_lane and room(BASELINE_RUN):
            offer(baseline("slurm"))  # (see above)
    else:
        # without a binding budget the baselines' plans are seldom better than the
        # greedy variants', but cheap where the time is long
        # next to a greedy run: optional candidates like the priority-first variant
        for name in ("k8s", "slurm"):
            if name not in in_lane and affordable(BASELINE_RUN):
                offer(baseline(name))
    # polish the greedy plan (planner/heuristics/repack.py, a few ms): big jobs went first, so
    # give their GPUs to more important deferred jobs where that raises the priority
    # value; then move jobs to GPUs left idle where that spares their victims. The
    # polished plan is the fallback and the whole model's hint. LNS starts from the
    # greedy plan relocated but not repacked (from the repacked plan its
    # neighbourhoods found fewer tier-2 GPUs at 4,096 nodes), and its result is
    # polished in turn. The slowest pass, moves to cheaper victims, runs once, on the
    # plan to return (and on the whole model's hint), in CHEAPER_TIMES x the time
    # the first two passes took
    tr = time.perf_counter()
    packed, polished = polish(problem, greedy,
                              None if deterministic else t0 + time_limit_s - reserve,
                              cheaper=False)
    polish_s = time.perf_counter() - tr  # LNS keeps as much for polishing its result
    if polished:
        plans.append(packed)
    late = None if deterministic else t0 + time_limit_s - reserve  # the last pass ends
    end = t0 + time_limit_s - reserve - CHEAPER_TIMES * polish_s  # ... and has this long
    # ejection moves stop with a wall clock where LNS's result does, leaving the last
    # polishing pass its time, but not before half the time left (eject_deadline); in
    # deterministic mode after EJECT_TRIES tried moves (R14)
    def eject_limit() -> dict[str, float]:
        if deterministic:
            return {"tries": EJECT_TRIES}
        assert late is not None  # (set unless deterministic)
        return {"deadline": eject_deadline(time.perf_counter(), end, late)}

    def skipped(why: str) -> Plan:
        # the whole model does not fit in the budget: improve the greedy plan one
        # neighbourhood at a time with what is left (planner/solver/lns.py)
        lns_deadline = end - 1.5 * polish_s
        # keep a share for ejection moves when LNS still gets one whole round (at 256
        # nodes and 0.3 s it needs all its time for its two rounds). On a cluster of
        # more than two neighbourhoods LNS runs only with two whole rounds: fewer
        # re-solve a small part of the cluster and seldom improve its admissions, and
        # ejection moves get the time (docs/planner.md, section 3a)
        keep = EJECT_SHARE * max(0.0, end - time.perf_counter())
        big = usable > 2 * NEIGHBOURHOOD_NODES
        if lns_deadline - keep - time.perf_counter() >= (2 if big else 1) * ROUND_S:
            lns_deadline -= keep
        elif big:
            lns_deadline = time.perf_counter()
        best, lns = packed, None  # (rounds that improved, rounds, said) when LNS did
        if not deterministic and lns_deadline - time.perf_counter() >= LNS_MIN_S:
            # from the greedy plan relocated but not repacked (see above)
            start, _moves = relocate(problem, greedy, lns_deadline)
            # (with a second lane on the other core, one worker)
            res = improve(problem, start, lns_deadline,
                          workers=max(1, workers - 1) if lane else workers, seed=seed)
            d, more = polish(problem, res.decision, end, cheaper=False)
            better = objective_of(problem, d).key() > objective_of(problem, packed).key()
            if res.improved and better:
                best, lns = d, (res.improved, res.rounds, more)
            else:
                why += (f"; {res.rounds} neighbourhood round(s) found nothing better"
                        + (" than polishing" if res.improved else ""))
        # ejection moves on the plan to return (planner/heuristics/eject.py); without a binding
        # eviction budget before the baselines below, which are rarely better there
        ejected = swaps = 0
        if not spare.budget_rejected:
            best, ejected, swaps = eject_and_upgrade(problem, best, eject_limit())
        # the rounds stop after a pass without improvement, often well before their
        # deadline: the baselines that did not run above compete in the time left
        base_said = ""
        for name in ("k8s", "slurm"):
            if (name in baselines_ran or name in in_lane
                    or time.perf_counter() + BASELINE_RUN * first_s >= end):
                continue
            b = baseline(name)
            if score(b) > score(best):
                best, more = polish(problem, b, end, cheaper=False)
                base_said = (f"the {BASELINE_NAMES[name]} baseline's plan, better, returned"
                             + (f" after {more}" if more else ""))
                ejected = swaps = 0
        if spare.budget_rejected or base_said:
            best, ejected, swaps = eject_and_upgrade(problem, best, eject_limit())
        best, cheaper = cheaper_victims(problem, best, late)
        after = _also(_moved(ejected, swaps), cheaper)
        if lane is not None:
            assert late is not None  # (a second lane runs only with a wall-clock budget)
            other = lane.result(late - LANE_GRACE_S)
            if other is None:
                why += ("; the second lane gave no plan ("
                        f"{lane.error or 'no time for one more greedy run'})")
            elif score(other[0]) > score(best):
                return assemble(problem, other[0], "fallback",
                                SolverInfo(engine="cp-sat", status="SKIPPED",
                                           wall_s=time.perf_counter() - t0,
                                           detail=f"{why}; {other[1]}"))
        if base_said:
            return assemble(problem, best, "fallback",
                            SolverInfo(engine="cp-sat", status="SKIPPED",
                                       wall_s=time.perf_counter() - t0,
                                       detail=f"{why}; {_also(base_said, after)}"))
        if lns is not None:
            more = _also(lns[2], after)
            return assemble(problem, best, "feasible",
                            SolverInfo(engine="cp-sat", status="LNS",
                                       wall_s=time.perf_counter() - t0,
                                       detail=f"{why}; the greedy plan{second} was improved "
                                       f"in {lns[0]} of {lns[1]} neighbourhood rounds"
                                       + (f", then by {more}" if more else "")))
        said = _also(polished, after)
        return assemble(problem, best, "fallback",
                        SolverInfo(engine="cp-sat", status="SKIPPED",
                                   wall_s=time.perf_counter() - t0,
                                   detail=f"{why}; greedy plan{second} returned"
                                   + (f" after {said}" if said else "")))

    missing = short()
    if missing is not None and missing > 0:
        return skipped("no time left to build and solve the model after the greedy plan "
                       f"(about {max(missing, 0.1):.1f} s more would let CP-SAT solve the "
                       "whole model)")
    if lane is not None:  # (not expected: the model was to be skipped)
        lane.close()
    factor = 0 if n_pairs <= EXACT_PAIRS or not prune else 4
    # the whole model's hint and fallback: the polished plan with cheaper victims too
    packed, cheaper = cheaper_victims(problem, packed, deadline)
    if cheaper:
        plans.append(packed)
    # candidate pruning keeps the nodes every greedy plan used (the cheap ones too)
    used: dict[str, frozenset[int]] = {}
    for d in plans:
        for j, parts in d.placements.items():
            used[j] = used.get(j, frozenset()) | {ni for ni, _m in parts}
    try:
        model = CpsatModel(problem, candidate_factor=factor, keep_nodes=used, deadline=deadline)
    except BuildTimeout:
        return skipped("the model could not be built in time")
    build_s = time.perf_counter() - t0
    if not model.classes:
        return assemble(problem, packed, "optimal" if not model.approximate else "feasible",
                        SolverInfo(engine="cp-sat", status="OPTIMAL", gap=0.0,
                                   detail="nothing to place"))
    # deterministic mode splits the budget without looking at the clock (R14)
    # (wall-clock mode keeps some of the budget for extraction, assembly and checks)
    remaining = time_limit_s if deterministic else time_limit_s - reserve - build_s
    res = run_phases(model, packed, remaining, deterministic=deterministic, workers=workers,
                     seed=seed, log=log)
    phases, statuses, best = res.phases, res.statuses, res.best
    bound_info, cost_bound = res.bound_info, res.cost_bound
    wall = time.perf_counter() - t0
    if best is None:
        return assemble(problem, packed, "fallback",
                        SolverInfo(engine="cp-sat", status=statuses[-1] if statuses else "NONE",
                                   wall_s=wall, detail="solver gave no solution in time; greedy "
                                   "plan returned"))
    proven = (len(statuses) == len(phases) and all(s == "OPTIMAL" for s in statuses)
              and not model.approximate and not model.pruned)
    # never worse than the greedy plan (the model may not express every NVLink set)
    if objective_of(problem, packed).key() > objective_of(problem, best).key():
        best, proven, cost_bound = packed, False, None
    more = ""
    if not proven:  # an unproven plan may still leave a swap or a move
        # (planner/heuristics/repack.py, planner/heuristics/eject.py)
        best, ejected, swaps = eject_and_upgrade(problem, best, eject_limit())
        best, more = polish(problem, best, late)
        if ejected or swaps:  # the phases' bounds were for other admissions
            more = _also(_moved(ejected, swaps), more)
            bound_info = cost_bound = None
    gap = None  # relative gap of the last phase, reported only when every phase ran
    if bound_info is not None and len(statuses) == len(phases) and "SKIPPED" not in statuses:
        obj, bnd = bound_info
        gap = 0.0 if proven else abs(bnd - obj) / max(1.0, abs(obj))
        if more and cost_bound is not None:  # the polished plan's cost against the bound
            cost = objective_of(problem, best).eviction_cost_gpu_s
            gap = max(0.0, cost - cost_bound) / max(1.0, cost)
    status = "optimal" if proven else "feasible"
    if proven:
        cost_bound = objective_of(problem, best).eviction_cost_gpu_s
    built = "" if deterministic else f"; model built in {build_s:.3f} s"
    detail = (f"{len(phases)} phase(s): {', '.join(statuses)}{built}"
              + ("; NVLink sets across cliques not modelled" if model.approximate else "")
              + ("; candidate nodes pruned" if model.pruned else "")
              + (f"; then {more}" if more else ""))
    return assemble(problem, best, status,
                    SolverInfo(engine="cp-sat", status="/".join(statuses), wall_s=wall,
                               gap=gap, bound=cost_bound, detail=detail))
