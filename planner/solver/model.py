"""The CP-SAT tick model.

Aggregation keeps the model small whatever the queue length:

* Pending jobs that only differ in priority and id form a *class*; the model
  chooses how many jobs of a class to admit (``a[c][i]`` ordered Booleans, so the
  admitted ones are the highest-priority ones) and how many shards of the class
  go to each NVLink *island* of each candidate node (integer counts).
* Inside a node, islands are cliques of the NVLink graph (every contract form
  but explicit edge lists is a union of cliques), so any set of GPUs inside one
  island is connected (R3): only counts matter, and concrete GPU indices are
  chosen after the solve. Explicit edge graphs are split into cliques plus a
  "whole component" option; placements that need other connected sets are left
  to the greedy plan, and the status is then at most ``feasible``.
* GPUs of an island come from free GPUs and from victims; R7 (who may use whose
  GPUs) is a transportation problem per island, enforced exactly by Hall's
  condition over the distinct rights sets present.

Rules: each rule of the contract is one method named after it (``_r01_capacity``
... ``_r17_ending_soon``; ``grep -n "def _r07" model.py``). Those that add
constraints: R1 capacity (with R7's rights), R2 gangs, R3 groups, R7 beneficiaries,
R11/R12 the per-storage load cap, R13 the budgets, R15 the rolling budget. The
others are applied before the model, for every planner, in
planner/core/problem.py: R4 (with R1's and R3's node filters) by candidate nodes,
R9 by leaving jobs in backoff out, R5, R6, R8 and R17 by giving protected jobs no
eviction variable, R10 and R16 by an empty rights set; their methods say what
the model relies on. The lexicographic objective is solved in phases;
consecutive items are merged into one weighted phase while the weights fit in
64 bits. :func:`run_phases` solves them from a hint; planner/solver/cpsat.py decides when
the whole model is built, and planner/solver/lns.py builds it for parts of the cluster.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, cast

from ortools.sat.python import cp_model

from planner.core import topology as topo
from planner.core.budget import Budget
from planner.core.decision import Decision, clean, exempt_victims, preemptors_of
from planner.core.problem import MB_PER_GB, PendingInfo, Problem
from planner.solver.cpmodel import CpModel
from planner.solver.speed import scaled

COST_SCALE = 100  # eviction cost in 1/100 GPU-s inside the model
FIRST_PHASE_SHARE = 0.6  # of the budget for admissions; the rest minimises cost
PRESOLVE_OFF_VARS = 2_000  # skip presolve on models this big ...
# ... when a phase has less time than this on the benchmark machine
# (presolve_off_below_s(): on this one, planner/solver/speed.py)
PRESOLVE_OFF_BELOW_S = 1.5
MAX_PATTERNS = 256  # connected GPU sets per (class, node) on non-clique NVLink graphs
VICTIM_CUTS = True  # add the necessary-victim cuts (see CpsatModel._victim_cuts)
ADMISSION_PRESOLVE = False  # presolve the admission phases (the cost phase always is)
# least solver time worth building the model for, on the benchmark machine
# (min_solve_s(): on this one)
MIN_SOLVE_S = 0.05
# what each solve pays beyond its CP-SAT time, besides extracting the solution (the
# solve ends 10-30 ms after its limit), on the benchmark machine (solve_overhead_s():
# on this one)
SOLVE_OVERHEAD_S = 0.02
# the least CP-SAT time limit a phase is given with a wall clock, on the benchmark
# machine (least_phase_s(): on this one)
LEAST_PHASE_S = 0.01
MAX_WORKERS = 256  # CP-SAT workers at most, whatever the caller asks for
_LIMIT = 2**50  # phase objective span: exact in doubles, far from CP-SAT's overflow checks


def min_solve_s(deterministic: bool = False) -> float:
    """The least solver time worth building the model for, on this machine
    (MIN_SOLVE_S scaled by planner/solver/speed.py's factor; as is in deterministic mode)."""
    return scaled(MIN_SOLVE_S, deterministic)


def solve_overhead_s() -> float:
    """SOLVE_OVERHEAD_S on this machine (scaled by the speed factor; a deterministic
    solve has no overhead counted)."""
    return scaled(SOLVE_OVERHEAD_S)


def least_phase_s() -> float:
    """LEAST_PHASE_S on this machine (scaled by the speed factor; only with a wall
    clock)."""
    return scaled(LEAST_PHASE_S)


def presolve_off_below_s(deterministic: bool = False) -> float:
    """Below this phase time presolve is skipped on big models, on this machine
    (PRESOLVE_OFF_BELOW_S scaled; as is in deterministic mode, where the phase time is
    a deterministic time)."""
    return scaled(PRESOLVE_OFF_BELOW_S, deterministic)


class BuildTimeout(Exception):
    """The model could not be built before the deadline."""


@dataclass
class _Class:
    key: tuple
    jobs: list[PendingInfo]  # highest priority first
    gpn: int
    nodes: int
    tier: int
    rights: frozenset[int]
    single_island: bool  # nvlink (or 1 GPU): each shard inside one island
    group_by: tuple[bool, bool]  # same_block, same_nvlink_domain
    candidates: list[int]
    admit: list[cp_model.IntVar] = field(default_factory=list)
    count: cp_model.IntVar = field(init=False)  # (set by _class_vars)
    shards: dict[int, list] = field(default_factory=dict)  # node -> [(island idx|comp, var)]
    node_total: dict[int, list[cp_model.IntVar]] = field(default_factory=dict)  # shards per node
    groups: list[tuple[cp_model.IntVar, list[int]]] = field(default_factory=list)
    hintable: list[cp_model.IntVar] = field(default_factory=list)  # other decision vars


def _class_key(info: PendingInfo) -> tuple:
    j = info.job
    return (j.tier, j.gpus_per_node, j.nodes, j.gpu_type, info.need_nvlink, j.same_block,
            j.same_nvlink_domain, tuple(sorted(info.rights)), tuple(info.candidates))


class CpsatModel:
    def __init__(self, problem: Problem, *, candidate_factor: int = 0, min_candidates: int = 32,
                 keep_nodes: dict[str, frozenset[int]] | None = None,
                 budget: Budget | None = None):
        self.p = problem
        self.budget = budget  # past its end, BuildTimeout (None, or deterministic: never)
        self.candidate_factor = candidate_factor  # 0: keep every possible node (exact)
        self.min_candidates = min_candidates
        self.keep_nodes = keep_nodes or {}  # job id -> nodes the hint uses for it
        self.pruned = False
        self._rmask: dict[tuple[int, frozenset[int]], int] = {}
        self.m = CpModel()
        self.approximate = False
        self.classes: list[_Class] = []
        self.evict: dict[str, cp_model.IntVar] = {}
        self.island_demand: dict[tuple[int, int], dict[frozenset, list]] = defaultdict(
            lambda: defaultdict(list))
        self.gpu_demand: dict[tuple[int, int], list] = defaultdict(list)
        # (node, GPU) -> the demand of classes that may not take an exempt victim's GPUs
        # (R15 with thrash.exempt_if: all)
        self.gpu_other: dict[tuple[int, int], list] = defaultdict(list)
        self.items: list[tuple[str, list, list[int], int, int]] = []  # objective items
        # thrash.past_budget_gpu_s in the cost item: the victims R15's window has left
        # past which each is priced (_past_budget; None: not priced)
        self.past_left: int | None = None
        self.caps: list[tuple[cp_model.IntVar, list[str], list[int], int]] = []  # storm caps
        # R15: victim -> "exempt" literal, and the literal "within what the window has left"
        self.exempt: dict[str, cp_model.IntVar] = {}
        # R15's touches: cell (node, island or ("gpu", g)) -> [(victim, literal)]
        self._touch: dict[tuple[int, Any], list[tuple[str, Any]]] = defaultdict(list)
        self.within: cp_model.IntVar | None = None
        self._build()

    # -- construction ---------------------------------------------------------------
    def _build(self) -> None:
        p = self.p
        groups: dict[tuple, list[PendingInfo]] = defaultdict(list)
        for info in sorted(p.pending.values(), key=lambda i: i.job.id):
            if not self._r09_backoff(info) and info.candidates:
                groups[_class_key(info)].append(info)
        for key in sorted(groups, key=repr):
            jobs = sorted(groups[key], key=lambda i: (-i.job.priority, i.job.id))
            j = jobs[0].job
            c = _Class(key, jobs, j.gpus_per_node, j.nodes, j.tier, jobs[0].rights,
                       jobs[0].need_nvlink or j.gpus_per_node == 1,
                       (j.same_block, j.same_nvlink_domain), [])
            self._prune(c)
            if c.candidates:
                self.classes.append(c)
            self._check_time()
        self._victim_vars()
        for c in self.classes:
            self._class_vars(c)
            self._check_time()
        self._exempt_vars()
        self._r01_capacity()
        self._r07_beneficiary()
        self._r11_storm()
        self._r13_budgets()
        self._r15_thrash_budget()
        self._objective_items()

    def _check_time(self) -> None:
        if self.budget is not None and self.budget.expired():
            raise BuildTimeout

    # -- rules applied in preprocessing (planner/core/problem.py, for every planner) ---
    def _r04_pools(self, info: PendingInfo) -> list[int]:
        """R4, with R1's and R3's node filters: the nodes a job's shards may use are its
        candidate nodes, which problem.py chose (``node_can_host``: up, of its GPU
        type, in a pool that admits its tier, in a block or NVLink domain when it
        keeps one, with room for a connected shard when it needs NVLink)."""
        return info.candidates

    def _r05_preemptible(self) -> list[str]:
        """R5: a running job of a tier that is not preemptible gets no eviction
        variable: problem.py marks it not evictable. The jobs of this model's problem
        that R5 protects."""
        return self._protected_by("R5")

    def _r06_immunity(self) -> list[str]:
        """R6: a running job inside its tier's ``min_runtime_s`` gets no eviction
        variable: problem.py marks it not evictable. The jobs R6 protects here."""
        return self._protected_by("R6")

    def _r08_windows(self) -> list[str]:
        """R8: a running job of a tier outside its preemption windows gets no eviction
        variable: problem.py marks it not evictable. The jobs R8 protects here."""
        return self._protected_by("R8")

    def _r09_backoff(self, info: PendingInfo) -> bool:
        """R9: is the job in backoff (problem.py: ``held_until``)? Then it gets no
        variables and stays deferred."""
        return info.held_until is not None

    def _r10_cascade_guard(self) -> list[str]:
        """R10: a job preempted within ``cascade_guard_s`` takes only free GPUs:
        problem.py gives it no rights, so its class draws on no victim's GPUs in the
        capacity rows. The pending jobs R10 restricts here."""
        return sorted(j for j, i in self.p.pending.items() if i.guarded)

    def _r16_patience(self) -> list[str]:
        """R16: a job queued for less than its tier's ``preempt_after_s`` takes only free
        GPUs: problem.py gives it no rights, as for R10. The pending jobs R16
        restricts here."""
        return sorted(j for j, i in self.p.pending.items() if i.patient_until is not None)

    def _r17_ending_soon(self) -> list[str]:
        """R17: a running job expected to end within ``spare_ending_within_s`` gets no
        eviction variable: problem.py marks it not evictable. The jobs R17 protects
        here."""
        return self._protected_by("R17")

    def _protected_by(self, rule: str) -> list[str]:
        """The running jobs that ``rule`` is the first to protect (``VictimInfo.rule``)."""
        return sorted(v for v, i in self.p.running.items() if i.rule == rule)

    # -- variables ------------------------------------------------------------------
    def _rightful_mask(self, node: int, rights: frozenset[int]) -> int:
        """Free GPUs plus GPUs of evictable victims of the given tiers (cached)."""
        key = (node, rights)
        hit = self._rmask.get(key)
        if hit is not None:
            return hit
        m = self.p.nodes[node].free
        for vid in self._victims_on.get(node, ()):
            if self.p.running[vid].job.tier in rights:
                m |= self._vmask[(vid, node)]
        self._rmask[key] = m
        return m

    def _prune(self, c: _Class) -> None:
        """Keep the nodes where one shard could fit on free GPUs plus GPUs of victims
        the class may take (numpy-free but cheap: bit counts, then a cached fit)."""
        if not hasattr(self, "_victims_on"):
            self._victims_on: dict[int, list[str]] = defaultdict(list)
            self._vmask: dict[tuple[str, int], int] = {}
            for vid, v in sorted(self.p.running.items()):
                if v.evictable:
                    for ni, m in v.parts:
                        if self.p.nodes[ni].usable:
                            self._victims_on[ni].append(vid)
                            self._vmask[(vid, ni)] = m
        need = c.jobs[0].need_nvlink
        for ni in self._r04_pools(c.jobs[0]):
            m = self._rightful_mask(ni, c.rights)
            if m.bit_count() < c.gpn:
                continue
            if self.p.nodes[ni].fits(m, c.gpn, need):
                c.candidates.append(ni)
        keep = max(self.min_candidates, self.candidate_factor * len(c.jobs) * c.nodes)
        if self.candidate_factor and len(c.candidates) > keep and not any(c.group_by):
            # heuristic pruning for big clusters: the nodes where one shard is cheapest
            # to host (free first, then cheapest victims by cost), plus the nodes the
            # hint uses; the plan is then no longer proven optimal
            must = frozenset().union(*(self.keep_nodes.get(i.job.id, frozenset())
                                       for i in c.jobs))
            ranked = sorted(c.candidates, key=lambda ni: (ni not in must, self._score(ni, c), ni))
            c.candidates = sorted(ranked[:keep] + [ni for ni in ranked[keep:] if ni in must])
            self.pruned = True

    def _score(self, ni: int, c: _Class) -> tuple[float, int]:
        """Rough cost to free one shard of class c on node ni (topology ignored)."""
        have = self.p.nodes[ni].free.bit_count()
        if have >= c.gpn:
            return (0.0, have - c.gpn)
        cost = 0.0
        vs = [v for v in self._victims_on.get(ni, ()) if self.p.running[v].job.tier in c.rights]
        for v in sorted(vs, key=lambda v: self.p.running[v].cost):
            cost += self.p.running[v].cost
            have += self._vmask[(v, ni)].bit_count()
            if have >= c.gpn:
                break
        return (cost, 0)

    def _victim_vars(self) -> None:
        wanted: set[str] = set()
        for c in self.classes:
            for ni in c.candidates:
                for vid in self._victims_on.get(ni, ()):
                    if self.p.running[vid].job.tier in c.rights:
                        wanted.add(vid)
        for vid in sorted(wanted):
            self.evict[vid] = self.m.new_bool_var(f"e[{vid}]")

    def _class_vars(self, c: _Class) -> None:
        m = self.m
        n_jobs = len(c.jobs)
        c.admit = [m.new_bool_var(f"a[{c.jobs[i].job.id}]") for i in range(n_jobs)]
        for i in range(n_jobs - 1):
            m.add_implication(c.admit[i + 1], c.admit[i])
        c.count = m.new_int_var(0, n_jobs, f"k[{c.key}]")
        m.add(_sum(c.admit) == c.count)
        cap_shards = n_jobs
        for ni in c.candidates:
            info = self.p.nodes[ni]
            terms: list[cp_model.IntVar] = []
            if info.composites:  # NVLink graph is not a union of cliques: GPU level
                self._gpu_level_vars(c, ni, terms)
            elif c.single_island:
                rm = self._rightful_mask(ni, c.rights)
                for ii, isl in enumerate(info.islands):
                    ub = min((rm & isl).bit_count() // c.gpn, cap_shards)
                    if ub == 0:
                        continue
                    v = m.new_int_var(0, ub, f"y[{c.key[0]},{ni},{ii}]")
                    c.shards.setdefault(ni, []).append((ii, v))
                    terms.append(v)
                    self.island_demand[(ni, ii)][self._demand_rights(c)].append((c.gpn, v))
                    if VICTIM_CUTS:
                        self._victim_cuts(ni, c, rm & isl, ub, v)
            else:  # topology "any": GPUs of a shard may come from several islands
                x = m.new_int_var(0, min(info.node.gpus // c.gpn, cap_shards), f"x[{ni}]")
                q_terms = []
                for ii, isl in enumerate(info.islands):
                    q = m.new_int_var(0, min(isl.bit_count(), c.gpn * cap_shards), f"q[{ni},{ii}]")
                    q_terms.append(q)
                    c.shards.setdefault(ni, []).append((ii, q))
                    self.island_demand[(ni, ii)][self._demand_rights(c)].append((1, q))
                m.add(_wsum([*q_terms, x], [1] * len(q_terms) + [-c.gpn]) == 0)
                c.node_total[ni] = [x]
                c.hintable.append(x)
                continue
            if terms:
                c.node_total[ni] = terms
        c.candidates = [ni for ni in c.candidates if ni in c.node_total]
        self._r02_gang(c)

    def _r02_gang(self, c: _Class) -> None:
        """R2: every admitted job of class c gets exactly ``c.nodes`` shards, on distinct
        nodes (a node holds at most one shard per admitted job); a gang that keeps one
        block or NVLink domain gets them inside one group (:meth:`_r03_topology`)."""
        m = self.m
        total = [v for ni in c.candidates for v in c.node_total[ni]]
        if c.nodes == 1:
            m.add(_wsum([*total, c.count], [1] * len(total) + [-1]) == 0)
            return
        if not any(c.group_by):
            m.add(_wsum([*total, c.count], [1] * len(total) + [-c.nodes]) == 0)
            for ni in c.candidates:
                vs = c.node_total[ni]
                m.add(_wsum([*vs, c.count], [1] * len(vs) + [-1]) <= 0)
            return
        self._r03_topology(c)

    def _r03_topology(self, c: _Class) -> None:
        """R3: NVLink jobs get connected GPUs by the shard variables themselves (a shard
        inside one island, which is a clique, or on one connected GPU set of a node
        whose graph is not a union of cliques: :meth:`_class_vars`,
        :meth:`_gpu_level_vars`). Here, ``same_block`` / ``same_nvlink_domain``: the
        admitted jobs of class c are counted per group (``kg``), each group holding
        ``c.nodes`` shards per job on distinct nodes, and the groups' jobs add up to
        the class's."""
        m = self.m
        n_jobs = len(c.jobs)
        by_group: dict[tuple, list[int]] = defaultdict(list)
        for ni in c.candidates:
            node = self.p.nodes[ni].node
            by_group[(node.block if c.group_by[0] else None,
                      node.nvlink_domain if c.group_by[1] else None)].append(ni)
        gvars = []
        for gi, g in enumerate(sorted(by_group, key=repr)):
            kg = m.new_int_var(0, n_jobs, f"kg[{gi}]")
            gvars.append(kg)
            c.groups.append((kg, by_group[g]))
            vs = [v for ni in by_group[g] for v in c.node_total[ni]]
            m.add(_wsum([*vs, kg], [1] * len(vs) + [-c.nodes]) == 0)
            for ni in by_group[g]:
                vs = c.node_total[ni]
                m.add(_wsum([*vs, kg], [1] * len(vs) + [-1]) <= 0)
        m.add(_sum(gvars) == c.count)

    def _victim_cuts(self, ni: int, c: _Class, avail: int, ub: int, y: cp_model.IntVar) -> None:
        """Without victim u only k shards of c fit in these GPUs, so y <= k + (ub - k) e_u.
        Valid alone (other classes only take capacity away) and much tighter than the
        capacity rows in the LP, which otherwise places a fraction of a shard on GPUs
        of cheap victims."""
        for vid in self._victims_on.get(ni, ()):
            vm = self._vmask[(vid, ni)] & avail
            if not vm:
                continue
            k = (avail & ~vm).bit_count() // c.gpn
            if k < ub:
                self.m.add(_wsum([y, self.evict[vid]], [1, -(ub - k)]) <= k)

    def _gpu_level_vars(self, c: _Class, ni: int, terms: list) -> None:
        """Exact GPU-level choice on a node whose NVLink graph is not a union of
        cliques (e.g. a hybrid cube-mesh): one Boolean per connected GPU set a shard
        may take (R3), or per GPU for topology "any"; R1 and R7 per GPU."""
        m = self.m
        info = self.p.nodes[ni]
        avail = self._rightful_mask(ni, c.rights)
        if c.single_island:
            if c.gpn == 1:
                pats = tuple(1 << g for g in range(info.node.gpus) if avail >> g & 1)
            else:
                pats = topo.layout_connected_subsets(info.layout, avail, c.gpn,
                                                     limit=MAX_PATTERNS + 1)
                if len(pats) > MAX_PATTERNS:
                    pats = pats[:MAX_PATTERNS]
                    self.approximate = True
            for pat in pats:
                v = m.new_bool_var(f"z[{ni},{pat}]")
                c.shards.setdefault(ni, []).append((("pat", pat), v))
                terms.append(v)
                for g in range(info.node.gpus):
                    if pat >> g & 1:
                        self.gpu_demand[(ni, g)].append(v)
                        if not self._exempt_only(c):
                            self.gpu_other[(ni, g)].append(v)
            return
        x = m.new_int_var(0, min(avail.bit_count() // c.gpn, len(c.jobs)), f"x[{ni}]")
        us = []
        for g in range(info.node.gpus):
            if avail >> g & 1:
                u = m.new_bool_var(f"u[{ni},{g}]")
                us.append(u)
                c.shards.setdefault(ni, []).append((("gpu", g), u))
                self.gpu_demand[(ni, g)].append(u)
                if not self._exempt_only(c):
                    self.gpu_other[(ni, g)].append(u)
        m.add(_wsum([*us, x], [1] * len(us) + [-c.gpn]) == 0)
        c.hintable.append(x)
        terms.append(x)

    def _gpu_capacity(self) -> None:
        """Each GPU of a GPU-level node serves at most one shard, and only if it is
        free or its holder is evicted (the holder's tier is in the user's rights by
        construction of the candidate sets)."""
        split = self.p.thrash is not None and self.p.thrash.exempt_all
        for (ni, g), vs in sorted(self.gpu_demand.items()):
            owner = self.p.owner.get((ni, g))
            if owner is None:
                self.m.add(_sum(vs) <= 1)
            elif owner in self.evict:
                self.m.add(_wsum([*vs, self.evict[owner]], [1] * len(vs) + [-1]) <= 0)
                x = self.exempt.get(owner)
                others = self.gpu_other.get((ni, g))
                if split and x is not None and others:  # R15, exempt_if: all
                    self.m.add(_wsum([*others, self.evict[owner], x],
                                     [1] * len(others) + [-1, 1]) <= 0)
            else:
                self.m.add(_sum(vs) == 0)

    def _r01_capacity(self) -> None:
        """R1, with R7's rights: no GPU serves two shards, and a shard takes only GPUs
        free in the snapshot or freed by victims of tiers its class may preempt:
        Hall's condition per island (:meth:`_island_capacity`), one row per GPU on
        nodes modelled GPU by GPU (:meth:`_gpu_capacity`). (Down and draining nodes
        have no free GPUs and host no candidate shards: problem.py.)"""
        self._island_capacity()
        self._check_time()
        self._gpu_capacity()

    def _island_capacity(self) -> None:
        """Per island: Hall's condition between demand by rights set and supply."""
        p = self.p
        split = p.thrash is not None and p.thrash.exempt_all
        for (ni, ii), by_rights in sorted(self.island_demand.items()):
            info = p.nodes[ni]
            isl = info.islands[ii]
            free = (info.free & isl).bit_count()
            supply: dict[Any, list] = defaultdict(list)  # tier -> [(gpus, e)]
            for vid in self._victims_on.get(ni, ()):
                e = self.evict.get(vid)
                g = (self._vmask[(vid, ni)] & isl).bit_count()
                if e is None or not g:
                    continue
                t = p.running[vid].job.tier
                x = self.exempt.get(vid) if split else None
                if x is None:
                    supply[t].append((g, e))
                else:  # R15, exempt_if: all: g (e - x) for everyone, g x for exempt shards
                    supply[t] += [(g, e), (-g, x)]
                    supply[("exempt", t)].append((g, x))
            rights_sets = sorted(by_rights, key=lambda r: sorted(map(repr, r)))
            for r in range(1, len(rights_sets) + 1):
                for subset in itertools.combinations(rights_sets, r):
                    vs = [v for rs in subset for _w, v in by_rights[rs]]
                    cs = [w for rs in subset for w, _v in by_rights[rs]]
                    for t in sorted(set().union(*subset), key=repr):
                        for g, e in supply.get(t, ()):
                            vs.append(e)
                            cs.append(-g)
                    self.m.add(_wsum(vs, cs) <= free)

    def _demand_rights(self, c: _Class) -> frozenset:
        """The supplies class c's shards draw on in the capacity rows: the tiers it may
        preempt, and under ``exempt_if: all`` for an exempt class also the exempt
        victims' GPUs of those tiers (``("exempt", t)``)."""
        if not self._exempt_only(c):
            return c.rights
        return c.rights | frozenset(("exempt", t) for t in c.rights)

    def _r07_beneficiary(self) -> None:
        """R7: every victim has a placed job that may take its GPUs on one of its nodes
        (the other half of R7, who may take whose GPUs, is in the capacity rows:
        :meth:`_r01_capacity`)."""
        users: dict[str, list] = defaultdict(list)
        for c in self.classes:
            for ni in c.candidates:
                for vid in self._victims_on.get(ni, ()):
                    if vid in self.evict and self.p.running[vid].job.tier in c.rights:
                        users[vid].extend(c.node_total[ni])
        for vid, e in self.evict.items():
            if users[vid]:
                us = users[vid]
                self.m.add(_wsum([*us, e], [1] * len(us) + [-1]) >= 0)
            else:
                self.m.add(e == 0)

    def _r11_storm(self) -> None:
        """R11: on each storage target s, the load F_s of this tick's flushing victims
        stays within the cap of every one of them (:meth:`_r12_grace`). A victim whose
        flush breaks it even alone is protected in problem.py (no eviction variable)."""
        by_storage: dict[str, list[str]] = defaultdict(list)
        for vid in self.evict:
            v = self.p.running[vid]
            if v.flushing and v.storage is not None and math.isfinite(v.storm_cap_gb):
                by_storage[v.storage].append(vid)
        for s, vids in sorted(by_storage.items()):
            sizes = [math.ceil(self.p.running[v].flush_gb * MB_PER_GB - 1e-9) for v in vids]
            total = sum(sizes)
            caps = self._r12_grace(vids)
            if max(sizes) <= 0 or min(caps) >= total:
                continue
            cap = self.m.new_int_var(0, total, f"cap[{s}]")
            self.caps.append((cap, vids, caps, total))
            self.m.add(_wsum([*(self.evict[v] for v in vids), cap], [*sizes, -1]) <= 0)
            for vid, cv in zip(vids, caps):
                if cv < total:
                    self.m.add(cap <= max(cv, 0)).only_enforce_if(self.evict[vid])

    def _r12_grace(self, vids: list[str]) -> list[int]:
        """R12: a flushing victim needs a grace of ``max(min_s, safety x (F_s / bandwidth
        + barrier + cleanup))`` (or its local flush) within ``max_s``: the largest load
        F_s of its storage target for which that holds (problem.py, ``storm_cap_gb``),
        in MB, for each of ``vids``. The grace itself is derived from the loads after
        the solve (planner/checks/assemble.py)."""
        return [math.floor(self.p.running[v].storm_cap_gb * MB_PER_GB + 1e-9) for v in vids]

    def _r13_budgets(self) -> None:
        """R13: at most ``max_evictions_per_tick`` victims, whose GPUs are at most
        ``max_evicted_gpu_fraction`` of those on up and drain nodes."""
        pol = self.p.policy
        es = list(self.evict.items())
        if pol.max_evictions_per_tick is not None:
            self.m.add(_sum([e for _, e in es]) <= pol.max_evictions_per_tick)
        if pol.max_evicted_gpu_fraction is not None:
            limit = math.floor(pol.max_evicted_gpu_fraction * self.p.total_gpus_up_drain + 1e-9)
            self.m.add(_wsum([e for _, e in es], [self.p.running[v].job.total_gpus for v, _ in es])
                       <= limit)

    def _thrash_binds(self) -> bool:
        """Could R15 refuse some choice of this model's victims (else it is left out)?"""
        tb = self.p.thrash
        if tb is None:
            return False
        gpus = sum(self.p.running[vid].job.total_gpus for vid in self.evict)
        return len(self.evict) > tb.left or gpus > tb.gpus_left

    def _exempt_vars(self) -> None:
        """R15's exempt literals (before the capacity rows, which split an exempt
        victim's GPUs off from classes of other tiers under ``exempt_if: all``:
        :meth:`_exempt_vars_all`). Under ``exempt_if: any`` a victim is exempt when a
        job of an exempt tier uses one of its GPUs, whatever the others do: its literal
        needs a touch ``t`` in one of the cells it holds GPUs in (an island of a node,
        or a GPU of a node modelled GPU by GPU), and in each cell the victims touched
        need as many GPUs of exempt shards that may take their GPUs (Hall's condition
        over the victims' tiers: each touch is a GPU of its own, victims hold disjoint
        GPUs). Extraction gives each touched victim one GPU of an exempt shard there
        first (_pick)."""
        tb = self.p.thrash
        if tb is None or not self._thrash_binds():
            return
        if tb.exempt_all:
            self._exempt_vars_all()
            return
        m = self.m
        # cell -> (mask, [(rights, GPUs per unit, var)]) of the exempt classes' shards
        cells: dict[tuple[int, Any], tuple[int, list[tuple[frozenset, int, Any]]]] = {}
        for c in self.classes:
            if c.tier not in tb.exempt_tiers:
                continue
            for ni in c.candidates:
                isl = self.p.nodes[ni].islands
                for key, v in c.shards.get(ni, ()):
                    if isinstance(key, tuple):  # GPU level: a pattern or one GPU
                        gm = key[1] if key[0] == "pat" else 1 << key[1]
                        for g in range(gm.bit_length()):
                            if gm >> g & 1:
                                cells.setdefault((ni, ("gpu", g)), (1 << g, []))[1].append(
                                    (c.rights, 1, v))
                    else:
                        cells.setdefault((ni, key), (isl[key], []))[1].append(
                            (c.rights, c.gpn if c.single_island else 1, v))
        touches: dict[str, list] = defaultdict(list)
        for (ni, key), (mask, demand) in sorted(cells.items(), key=repr):
            rights = frozenset().union(*(r for r, _k, _v in demand))
            by_tier: dict[int, list] = defaultdict(list)
            for vid in self._victims_on.get(ni, ()):
                t = self.p.running[vid].job.tier
                if vid in self.evict and t in rights and self._vmask[(vid, ni)] & mask:
                    x = m.new_bool_var(f"t[{vid},{ni},{key}]")
                    by_tier[t].append(x)
                    touches[vid].append(x)
                    self._touch[(ni, key)].append((vid, x))
            tiers = sorted(by_tier)
            for r in range(1, len(tiers) + 1):
                for sub in itertools.combinations(tiers, r):
                    xs = [x for t in sub for x in by_tier[t]]
                    ds = [(k, v) for rs, k, v in demand if rs & set(sub)]
                    m.add(_wsum([*xs, *(v for _k, v in ds)],
                                [1] * len(xs) + [-k for k, _v in ds]) <= 0)
        self._exempt_literals(touches)

    def _exempt_vars_all(self) -> None:
        """R15's exempt literals under ``exempt_if: all``: a victim's literal needs a
        shard of a class of an exempt tier, with the right to take its GPUs, on one of
        its nodes; on each node at most one exempt victim (wholly there) per GPU such
        shards take. Only exempt classes take an exempt victim's GPUs there (the
        capacity rows), so a literal without a shard on its GPUs leaves a victim no job
        uses, which extraction drops (``clean``): the plan is never worse than the
        solution."""
        tb = self.p.thrash
        assert tb is not None
        m = self.m
        users: dict[str, list] = defaultdict(list)  # victim -> shard counts that exempt it
        demand: dict[int, tuple[list, list[int]]] = {}  # node -> exempt shards, GPUs each
        for c in self.classes:
            if c.tier not in tb.exempt_tiers:
                continue
            for ni in c.candidates:
                vs = c.node_total.get(ni, [])
                d = demand.setdefault(ni, ([], []))
                d[0].extend(vs)
                d[1].extend([c.gpn] * len(vs))
                for vid in self._victims_on.get(ni, ()):
                    if vid in self.evict and self.p.running[vid].job.tier in c.rights:
                        users[vid].extend(vs)
        self._exempt_literals(users)
        alone: dict[int, list] = defaultdict(list)  # node -> exempt literals of its victims
        for vid, x in self.exempt.items():
            nodes = {ni for ni, _m in self.p.running[vid].parts}
            if len(nodes) == 1:
                alone[next(iter(nodes))].append(x)
        for ni, xs in alone.items():
            vs, cs = demand.get(ni, ([], []))
            m.add(_wsum([*vs, *xs], [*(-c for c in cs), *([1] * len(xs))]) <= 0)

    def _exempt_literals(self, means: dict[str, list]) -> None:
        """Each victim's exempt literal: it implies the eviction and needs one of
        ``means[victim]`` (positive counts)."""
        m = self.m
        for vid, e in self.evict.items():
            if means[vid]:
                x = self.exempt[vid] = m.new_bool_var(f"ex[{vid}]")
                m.add_implication(x, e)
                m.add(_wsum([*means[vid], x], [1] * len(means[vid]) + [-1]) >= 0)

    def _exempt_only(self, c: _Class) -> bool:
        """Under ``exempt_if: all``, may shards of class c take exempt victims' GPUs?"""
        return self.p.thrash is not None and self.p.thrash.exempt_all and self.p.exempt(c.tier)

    def _r15_thrash_budget(self) -> None:
        """R15: ``X <= max(E, B - H)`` (X victims, E of them exempt): either within what
        the window has left (``within``), or every victim exempt (literals from
        _exempt_vars); extraction then gives exempt classes the exempt victims' GPUs
        (_pick), and ``clean`` drops what still breaks R15. With the GPU limit of the
        extension (``thrash.max_gpu_fraction``) the victims' GPUs are bounded the
        same way."""
        tb = self.p.thrash
        if tb is None or not self._thrash_binds():
            return
        m = self.m
        sizes = {vid: self.p.running[vid].job.total_gpus for vid in self.evict}
        gpus_left = tb.gpus_left
        gpu_binds = sum(sizes.values()) > gpus_left
        es, xs = list(self.evict.values()), list(self.exempt.values())
        left = tb.left
        # X - E <= max(0, B - H) holds either way: the whole rule when no victim can be
        # exempt or nothing is left, and a strong row for the LP otherwise (the same
        # for the victims' GPUs under a GPU limit)
        m.add(_wsum([*es, *xs], [1] * len(es) + [-1] * len(xs)) <= max(0, left))
        gs = [sizes[v] for v in self.evict]
        gxs = [sizes[v] for v in self.exempt]
        if gpu_binds:
            m.add(_wsum([*es, *xs], [*gs, *(-g for g in gxs)]) <= max(0, int(gpus_left)))
        if not xs or left <= 0:
            return
        # E is at most the GPUs the exempt classes could take (each exempt victim has
        # one of them) and the number of exempt literals
        most = min(len(xs), sum(c.gpn * c.nodes * len(c.jobs) for c in self.classes
                                if c.tier in tb.exempt_tiers))
        if most <= left and not gpu_binds:  # then max(E, B - H) = B - H
            m.add(_sum(es) <= left)
            return
        if most > left:
            # the convex hull of the rule in (X, E), between (B - H, 0) and (most, most):
            # X * most <= (B - H) * most + E * (most - B + H); without it the solver
            # branched for seconds on 100 symmetric victims (tests/test_cross_tick.py)
            m.add(_wsum([*es, *xs], [most] * len(es) + [-(most - left)] * len(xs))
                  <= left * most)
        self.within = m.new_bool_var("r15_within")
        m.add(_sum(es) <= left).only_enforce_if(self.within)
        if gpu_binds:
            m.add(_wsum(es, gs) <= int(gpus_left)).only_enforce_if(self.within)
        m.add(_wsum([*es, *xs], [1] * len(es) + [-1] * len(xs)) <= 0).only_enforce_if(
            ~self.within)

    def _objective_items(self) -> None:
        """Items of the lexicographic objective as (name, vars, coefs, lo, hi), maximised."""
        tiers = sorted({c.tier for c in self.classes})
        for t in tiers:
            vs, cs = [], []
            for c in self.classes:
                if c.tier == t:
                    vs += c.admit
                    cs += [c.gpn * c.nodes] * len(c.admit)
            self.items.append((f"tier{t}", vs, cs, 0, sum(cs)))
        vs, cs = [], []
        for c in self.classes:
            for i, a in enumerate(c.admit):
                # (an integer: plan() scales fractional priorities to integers)
                w = cast(int, c.jobs[i].job.priority) * c.gpn * c.nodes
                if w:
                    vs.append(a)
                    cs.append(w)
        if vs:
            self.items.append(("priority", vs, cs, sum(min(0, w) for w in cs),
                               sum(max(0, w) for w in cs)))
        evs = sorted(self.evict)
        costs = [-round(self.p.running[v].cost * COST_SCALE) for v in evs]
        if evs:
            vs, cs, lo = [self.evict[v] for v in evs], list(costs), sum(costs)
            past = self._past_budget(evs)
            if past is not None:  # (var, GPU-s x COST_SCALE each, most victims past)
                vs.append(past[0])
                cs.append(-past[1])
                lo -= past[1] * past[2]
            self.items.append(("cost", vs, cs, lo, 0))
            self.items.append(("evictions", [self.evict[v] for v in evs], [-1] * len(evs),
                               -len(evs), 0))

    def _past_budget(self, evs: list[str]) -> tuple[cp_model.IntVar, int, int] | None:
        """``thrash.past_budget_gpu_s``: the victims past what R15's window has left
        (possible only when they are all exempt), each costing that much in the cost
        item: (the count's variable, its weight, its largest value), or None."""
        tb = self.p.thrash
        left = 0 if tb is None else max(0, tb.left)
        if tb is None or tb.past_gpu_s <= 0 or not self.exempt or len(evs) <= left:
            return None
        past = self.m.new_int_var(0, len(evs) - left, "past_budget")
        self.m.add(past >= _sum([self.evict[v] for v in evs]) - left)
        self.past_left = left
        return past, round(tb.past_gpu_s * COST_SCALE), len(evs) - left

    # -- phases ---------------------------------------------------------------------
    def item_values(self, d: Decision, problem: Problem | None = None) -> list[int]:
        """``d``'s value on each objective item, as the model counts it (maximised:
        the cost and the evictions negative, the cost in COST_SCALE units, with
        ``thrash.past_budget_gpu_s``'s victims past the window's budget). ``problem``:
        where ``d``'s jobs are (the model's own by default; the whole tick for a plan
        that may place a job the reduced tick left out, planner/core/reduce.py)."""
        src = self.p if problem is None else problem
        pend, run = src.pending, src.running
        out = []
        for name, _vs, cs, _lo, _hi in self.items:
            if name.startswith("tier"):
                t = int(name[4:])
                out.append(sum(pend[j].job.total_gpus for j in d.placements
                               if pend[j].job.tier == t))
            elif name == "priority":
                out.append(sum(cast(int, pend[j].job.priority) * pend[j].job.total_gpus
                               for j in d.placements))
            elif name == "cost":
                cost = -sum(round(run[v].cost * COST_SCALE) for v in d.victims)
                if self.past_left is not None:  # (the past-budget count: last)
                    cost += cs[-1] * max(0, len(d.victims) - self.past_left)
                out.append(cost)
            else:  # evictions
                out.append(-len(d.victims))
        return out

    def gap_of(self, res: PhaseResult, d: Decision,
               problem: Problem | None = None) -> tuple[str, float, float] | None:
        """Where ``d`` stands against the bounds the phases proved (``res``): the
        first objective item it falls short of, as (its name, ``d``'s value, the
        bound; the cost in GPU-s and the evictions as counts, both least), or
        ("", 0, 0) when ``d`` reaches the bound of every item; None when it reaches
        those of the items the phases bounded and a phase was not solved (or on an
        item it passes, which no plan the model holds can). A phase's
        bound B on its weighted sum bounds its first item by (B - the least of the
        items after it) / its weight, and each item after it, for the plans at the
        bounds before it, the same way; the phases after it hold for those plans
        (docs/planner.md, section 3)."""
        vals = self.item_values(d, problem)
        for pi, ks in enumerate(res.phases):
            if pi >= len(res.bounds):
                return None  # (a phase not solved: nothing proven after)
            weights = self.phase_weights(ks)
            top = res.bounds[pi]  # (CP-SAT's bound, a double)
            err = 4 * abs(top) * 2.0 ** -52 + 1e-6  # (its rounding, taken upwards)
            # what the phase's items may weigh (an integer: the sum is one), those
            # before at their bounds
            rest = math.floor(top + err)
            for i, (k, w) in enumerate(zip(ks, weights, strict=True)):
                if err / w >= 0.5:
                    return None  # (a double no longer tells this item's bound apart)
                least = sum(wj * self.items[kj][3] for kj, wj in zip(ks[i + 1:], weights[i + 1:],
                                                                      strict=True))
                bound = (rest - least) // w
                name = self.items[k][0]
                v = vals[k]
                if v > bound:
                    return None  # (past a proven bound: not a plan the model holds)
                if v < bound:
                    if name == "cost":
                        return "eviction cost", -v / COST_SCALE, -bound / COST_SCALE
                    if name == "evictions":
                        return "evictions", float(-v), float(-bound)
                    return (f"tier-{name[4:]} GPUs" if name.startswith("tier")
                            else "priority value"), float(v), float(bound)
                rest -= w * v
        return "", 0.0, 0.0

    def phases(self) -> list[list[int]]:
        """Group consecutive objective items into weighted phases that fit 64 bits."""
        out: list[list[int]] = []
        cur: list[int] = []
        span = 1
        for k, (_n, _v, _c, lo, hi) in enumerate(self.items):
            r = hi - lo + 1
            if cur and span * r < _LIMIT:
                cur.append(k)
                span *= r
            else:
                if cur:
                    out.append(cur)
                cur, span = [k], r
        if cur:
            out.append(cur)
        return out

    def phase_weights(self, ks: list[int]) -> list[int]:
        """The weights of items ks (first most important) in their phase's sum."""
        weights = []
        w = 1
        for k in reversed(ks):
            weights.append(w)
            lo, hi = self.items[k][3], self.items[k][4]
            w *= hi - lo + 1
        weights.reverse()
        return weights

    def phase_expr(self, ks: list[int]) -> tuple[cp_model.LinearExpr, list[int]]:
        """Weighted sum of items ks (first most important) and the weights."""
        weights = self.phase_weights(ks)
        vs, cs = [], []
        for k, wk in zip(ks, weights):
            _n, v, c, _lo, _hi = self.items[k]
            vs += v
            cs += [wk * x for x in c]
        return cp_model.LinearExpr.weighted_sum(vs, cs), weights

    # -- hints ----------------------------------------------------------------------
    def hint(self, d: Decision) -> None:
        hints: list[tuple[cp_model.IntVar, int]] = []
        placed_by_class: dict[int, int] = defaultdict(int)
        node_jobs: dict[tuple[int, int], int] = defaultdict(int)  # (class, node) -> shards
        group_jobs: dict[tuple[int, int], int] = defaultdict(int)  # (class, group) -> jobs
        shard_count: dict[tuple[int, int, object], int] = defaultdict(int)
        cls_of: dict[str, int] = {}
        for ci, c in enumerate(self.classes):
            for info in c.jobs:
                cls_of[info.job.id] = ci
        for j, parts in d.placements.items():
            if j not in cls_of:
                continue
            ci = cls_of[j]
            c = self.classes[ci]
            placed_by_class[ci] += 1
            for gi, (_kg, nodes) in enumerate(c.groups):
                if parts[0][0] in nodes:
                    group_jobs[(ci, gi)] += 1
            for ni, mask in parts:
                node_jobs[(ci, ni)] += 1
                isl = self.p.nodes[ni].islands
                if self.p.nodes[ni].composites:
                    if c.single_island:
                        shard_count[(ci, ni, ("pat", mask))] += 1
                    else:
                        for g in range(self.p.nodes[ni].node.gpus):
                            if mask >> g & 1:
                                shard_count[(ci, ni, ("gpu", g))] += 1
                elif c.single_island:
                    for ii, im in enumerate(isl):
                        if mask & im == mask:
                            shard_count[(ci, ni, ii)] += 1
                else:
                    for ii, im in enumerate(isl):
                        shard_count[(ci, ni, ii)] += (mask & im).bit_count()
        for ci, c in enumerate(self.classes):
            for i, a in enumerate(c.admit):
                hints.append((a, i < placed_by_class[ci]))
            for ni, lst in c.shards.items():
                for key, v in lst:
                    hints.append((v, shard_count.get((ci, ni, key), 0)))
            hints.append((c.count, placed_by_class[ci]))
            if not c.single_island:  # the shard counts x of topology-"any" classes
                for ni in c.candidates:
                    hints.append((c.node_total[ni][0], node_jobs.get((ci, ni), 0)))
            for gi, (kg, _nodes) in enumerate(c.groups):
                hints.append((kg, group_jobs.get((ci, gi), 0)))
        for vid, e in self.evict.items():
            hints.append((e, vid in d.victims))
        for cap, vids, caps, total in self.caps:
            hints.append((cap, min([total] + [cv for v, cv in zip(vids, caps) if v in d.victims])))
        if self.within is not None or self._touch:
            exempt = exempt_victims(self.p, preemptors_of(self.p, d))
            hints += [(x, vid in exempt and vid in d.victims) for vid, x in self.exempt.items()]
        if self._touch:  # a touch where a job of an exempt tier takes one of the victim's GPUs
            used: dict[int, int] = defaultdict(int)  # node -> GPUs exempt jobs take
            for jid, parts in d.placements.items():
                if self.p.exempt(self.p.pending[jid].job.tier):
                    for ni, mask in parts:
                        used[ni] |= mask
            for (ni, key), lst in self._touch.items():
                cell = (1 << key[1]) if isinstance(key, tuple) else self.p.nodes[ni].islands[key]
                hints += [(x, vid in d.victims and bool(self._vmask[(vid, ni)] & cell & used[ni]))
                          for vid, x in lst]
        if self.within is not None:
            tb = self.p.thrash
            assert tb is not None
            hints.append((self.within, len(d.victims) <= tb.left and sum(
                self.p.running[v].job.total_gpus for v in d.victims) <= tb.gpus_left))
        self.set_hints(hints)

    def set_hints(self, hints: list[tuple[cp_model.IntVar, int]]) -> None:
        """Replace the hints in bulk (per-variable add_hint is ~7x slower)."""
        self.m.clear_hints()
        h = self.m.proto.solution_hint
        h.vars.extend([v.index for v, _x in hints])
        h.values.extend([int(x) for _v, x in hints])

    def decision_vars(self) -> list[cp_model.IntVar]:
        """Every variable the hints cover (each once)."""
        out: list[cp_model.IntVar] = []
        for c in self.classes:
            out += c.admit
            for lst in c.shards.values():
                out += [v for _k, v in lst]
            out += [c.count, *c.hintable, *(g for g, _n in c.groups)]
        out += list(self.evict.values())
        out += [cap for cap, *_rest in self.caps]
        out += list(self.exempt.values())
        out += [x for lst in self._touch.values() for _v, x in lst]
        if self.within is not None:
            out.append(self.within)
        return out


def _sum(vs: list) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.sum(vs)


def _wsum(vs: list, cs: list[int]) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.weighted_sum(vs, cs)


def make_solver(time_limit_s: float, deterministic: bool, workers: int, seed: int,
                n_vars: int = 0, presolve: bool = True) -> cp_model.CpSolver:
    """A CP-SAT solver with the planner's parameters for one phase of ``time_limit_s``
    (a deterministic budget in deterministic mode) on a model of ``n_vars``
    variables."""
    s = cp_model.CpSolver()
    prm = s.parameters
    prm.random_seed = seed
    if deterministic:
        prm.num_workers = 1
        prm.max_deterministic_time = max(0.05, time_limit_s)
        prm.max_time_in_seconds = max(10.0, 20 * time_limit_s)  # safety net only
    else:
        # (CP-SAT refuses a huge count as an invalid model; more than the cores only
        # shares them, see warn_settings in planner/commands/_common.py)
        prm.num_workers = max(1, min(workers, MAX_WORKERS))
        prm.max_time_in_seconds = max(least_phase_s(), time_limit_s)
        if 2 <= workers <= 4:
            # with few workers the default portfolio has no LP-heavy worker; max_lp
            # (full linearization) proves the 256-node benchmark optimal about twice
            # as fast at the same plan quality
            prm.subsolvers.extend(["max_lp", "default_lp"])
    # full presolve takes much of a short budget on 2 cores: keep it light, and on
    # big models with a short budget skip it so that the search starts from the hint
    prm.cp_model_probing_level = 0
    prm.symmetry_level = 0
    prm.max_presolve_iterations = 1
    if not presolve or (n_vars > PRESOLVE_OFF_VARS
                        and time_limit_s < presolve_off_below_s(deterministic)):
        prm.cp_model_presolve = False
    return s


def _extract(model: CpsatModel, solver: cp_model.CpSolver) -> Decision | None:
    """Concrete victims and GPU indices from a solution (None if it does not realise).
    Under ``exempt_if: any`` the exempt shards first take one GPU of each victim they
    touch; where that order leaves another shard without GPUs, the GPUs are dealt
    again with exempt shards taking the victims the solution counts as exempt first,
    then with no victim preferred (the plan may then lose what R15 then refuses:
    ``clean``). A solution that counts a victim as exempt may need its GPUs for a
    shard that may not use the others' (a tier-1 shard on a node where a tier-3 and
    a tier-2 job are evicted, and a tier-2 shard that may take only the tier-3 job's
    GPUs: tests/test_cpsat_regressions.py)."""
    d = _realise(model, solver, spread=bool(model._touch))
    if d is None and model._touch:
        d = _realise(model, solver, spread=False)
    if d is None and model.exempt:
        d = _realise(model, solver, spread=False, exempt_first=False)
    return d


def _realise(model: CpsatModel, solver: cp_model.CpSolver, *, spread: bool,
             exempt_first: bool = True) -> Decision | None:
    """:func:`_extract` with or without ``spread`` (R15 touches first), and without it
    with or without ``exempt_first`` (exempt shards prefer the exempt victims)."""
    p = model.p
    d = Decision(victims={v for v, e in model.evict.items() if solver.value(e)})
    # R15: the victims the solution counts as exempt go to shards of exempt classes first
    exempt = frozenset(v for v, x in model.exempt.items() if solver.value(x))
    # and in each cell the victims it touches get one GPU of an exempt shard each before
    # any gets a second (a victim is exempt once an exempt job uses one of its GPUs)
    touch = {cell: {v for v, x in lst if solver.value(x)} for cell, lst in model._touch.items()}
    touched: set[str] = set()
    split = p.thrash is not None and p.thrash.exempt_all
    # which jobs of each class, and their shards per node/island
    freed: dict[int, dict[str, int]] = defaultdict(dict)
    for v in d.victims:
        for ni, vm in p.running[v].parts:
            freed[ni][v] = vm
    free = {n.idx: n.free for n in p.nodes}
    demands: dict[int, list] = defaultdict(list)  # node -> [(rights, class idx, island, gpus)]
    jobs_of: list[list[str]] = []
    for ci, c in enumerate(model.classes):
        k = solver.value(c.count)
        jobs_of.append([c.jobs[i].job.id for i in range(k)])
        for ni in c.candidates:
            for key, v in c.shards.get(ni, ()):
                val = solver.value(v)
                if val:
                    demands[ni].append((c.rights, ci, key, val))
    shard_masks: dict[int, list[tuple[int, int]]] = defaultdict(list)  # class -> [(node, mask)]
    for ni in sorted(demands):
        info = p.nodes[ni]
        per_class: dict[int, list[int]] = defaultdict(list)
        any_gpus: dict[int, int] = defaultdict(int)
        shared: dict[int, int] = defaultdict(int)  # tier -> shards on this node that may use it
        for rights, _ci, _key, val in demands[ni]:
            for t in rights:
                shared[t] += val
        # most rights first, preferring freed GPUs, so free GPUs remain for the others
        for rights, ci, key, val in sorted(demands[ni], key=lambda t: (-len(t[0]), t[1], repr(t[2]))):
            c = model.classes[ci]
            # R15 with exempt_if: all: only exempt classes take exempt victims' GPUs
            avoid = exempt if split and not p.exempt(c.tier) else frozenset()
            if isinstance(key, tuple):  # GPU level: the GPUs are given
                gm = key[1] if key[0] == "pat" else 1 << key[1]
                if _take_pool(free, freed, p, ni, rights, gm, avoid) != gm:
                    return None
                if p.exempt(c.tier):
                    touched.update(v for v, fm in freed.get(ni, {}).items() if fm & gm)
                _consume(free, freed, ni, gm)
                if key[0] == "pat":
                    per_class[ci].append(gm)
                else:
                    any_gpus[ci] |= gm
                continue
            isl = info.islands[key]
            n_gpus = val * c.gpn if c.single_island else val
            chunks = [c.gpn] * val if c.single_island else [n_gpus]
            for size in chunks:
                prefer: frozenset[str] = frozenset()
                if p.exempt(c.tier):  # (exempt victims' GPUs first; spread: those touched)
                    prefer = frozenset(touch.get((ni, key), set()) - touched) if spread \
                        else exempt if exempt_first else frozenset()
                mask = _pick(free, freed, p, ni, rights, isl, size, shared, prefer, avoid,
                             spread=spread)
                if mask is None:
                    return None
                if p.exempt(c.tier):
                    touched.update(v for v, fm in freed.get(ni, {}).items() if fm & mask)
                _consume(free, freed, ni, mask)
                if c.single_island:
                    per_class[ci].append(mask)
                else:
                    any_gpus[ci] |= mask
        for ci, masks in per_class.items():
            for mask in masks:
                shard_masks[ci].append((ni, mask))
        for ci, mask in any_gpus.items():  # split into shards of gpn GPUs
            gpn = model.classes[ci].gpn
            bl = [g for g in range(info.node.gpus) if mask >> g & 1]
            for s in range(0, len(bl), gpn):
                sm = 0
                for g in bl[s:s + gpn]:
                    sm |= 1 << g
                shard_masks[ci].append((ni, sm))
    for ci, c in enumerate(model.classes):
        jobs = jobs_of[ci]
        shards = sorted(shard_masks.get(ci, []))
        if len(shards) != len(jobs) * c.nodes:
            return None
        # gangs: shards listed node by node and dealt round robin to the class's jobs
        # give each job distinct nodes (at most `count` shards per node); with
        # block/domain groups, deal each group's shards to its own slice of jobs
        if c.groups:
            start = 0
            for kg, nodes in c.groups:
                k = solver.value(kg)
                members = set(nodes)
                grp = [s for s in shards if s[0] in members]
                if len(grp) != k * c.nodes:
                    return None
                _deal(d, jobs[start:start + k], grp)
                start += k
        else:
            _deal(d, jobs, shards)
    return clean(p, d)


def _deal(d: Decision, jobs: list[str], shards: list[tuple[int, int]]) -> None:
    for t, (ni, mask) in enumerate(shards):
        d.placements.setdefault(jobs[t % len(jobs)], []).append((ni, mask))


def _take_pool(free: dict[int, int], freed: dict[int, dict[str, int]], p: Problem, ni: int,
               rights: frozenset[int], within: int, avoid: frozenset[str] = frozenset()) -> int:
    m = free.get(ni, 0)
    for v, fm in freed.get(ni, {}).items():
        if p.running[v].job.tier in rights and v not in avoid:
            m |= fm
    return m & within


def _pick(free: dict[int, int], freed: dict[int, dict[str, int]], p: Problem, ni: int,
          rights: frozenset[int], isl: int, size: int,
          shared: dict[int, int] | None = None,
          prefer: frozenset[str] = frozenset(),
          avoid: frozenset[str] = frozenset(), spread: bool = False) -> int | None:
    """``size`` GPUs of island ``isl`` for a shard with these rights: GPUs freed by
    victims it may use (with ``spread`` one GPU of each victim in ``prefer`` first;
    those in ``prefer``, then those that the fewest other shards could use; never
    those in ``avoid``), then free GPUs (usable by everyone) last."""
    mask = 0
    got = 0
    shared = shared or {}
    usable = sorted((v not in prefer, shared.get(p.running[v].job.tier, 0), v, fm)
                    for v, fm in freed.get(ni, {}).items()
                    if p.running[v].job.tier in rights and v not in avoid)
    for later, _n, _v, fm in usable if spread else ():  # one GPU of each (R15: exempt)
        g = fm & isl & ~mask
        if later or got == size:
            break
        if g:
            mask |= g & -g
            got += 1
    if got == size:
        return mask
    pools = [fm for _x, _n, _v, fm in usable]
    pools.append(free.get(ni, 0))
    for pool in pools:
        g = pool & isl & ~mask
        while g and got < size:
            low = g & -g
            mask |= low
            g ^= low
            got += 1
        if got == size:
            return mask
    return None


def _consume(free: dict[int, int], freed: dict[int, dict[str, int]], ni: int, mask: int) -> None:
    free[ni] = free.get(ni, 0) & ~mask
    for v in freed.get(ni, {}):
        freed[ni][v] &= ~mask


_STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE",
           cp_model.INFEASIBLE: "INFEASIBLE", cp_model.MODEL_INVALID: "MODEL_INVALID",
           cp_model.UNKNOWN: "UNKNOWN"}


@dataclass
class PhaseResult:
    """What the lexicographic phases gave: the last extracted decision (None if no
    phase gave one), the status of each phase run (``SKIPPED`` when no time was
    left for it), the last phase's (objective, bound) and the proven lower bound
    on eviction cost in GPU-s (None unless a cost phase ran). ``realised``: every
    extracted decision places every job its solution admits (else a bound or a
    proof of the phases says nothing of the plan: :func:`_extract` could not realise
    the solution, which ``clean`` then cut)."""

    phases: list[list[int]]
    statuses: list[str]
    best: Decision | None
    bound_info: tuple[float, float] | None
    cost_bound: float | None
    realised: bool = True
    # each phase solved (OPTIMAL or FEASIBLE)'s proven bound on its weighted sum
    bounds: list[float] = field(default_factory=list)


def run_phases(model: CpsatModel, hint: Decision, budget: Budget, *, deterministic: bool,
               workers: int, seed: int, log: bool = False, speed: float = 1.0) -> PhaseResult:
    """Solve the model's phases in order from the hint, within the time ``budget``
    has left when they start (its whole length, as a deterministic time, in
    deterministic mode); each phase's share is counted from the time the phases
    before it used. ``speed``: this machine's time for the same work relative to
    the benchmark machine's (planner/solver/portfolio.py, Rates), which scales the
    per-variable part of each solve's overhead (its fixed part: solve_overhead_s())."""
    remaining = budget.left()
    phases = model.phases()
    statuses = []
    best: Decision | None = None
    bound_info = None
    cost_bound: float | None = None  # proven lower bound on eviction cost (GPU-s)
    # each solve also pays for loading the model and extracting the solution
    # (measured on the benchmark machine: the solve ends 10-30 ms after its limit,
    # SOLVE_OVERHEAD_S; extraction takes ~2 us/var)
    overhead = 0.0 if deterministic else (solve_overhead_s()
                                          + 4e-6 * speed * len(model.m.proto.variables))
    realised = True
    bounds: list[float] = []
    model.hint(hint)
    for pi, ks in enumerate(phases):
        if pi and not deterministic and remaining < overhead + min_solve_s() / 2:
            statuses.append("SKIPPED")  # no time for the later phases: keep the last plan
            break
        expr, weights = model.phase_expr(ks)
        model.m.maximize(expr)
        share = remaining / (len(phases) - pi) if pi < len(phases) - 1 else remaining
        if pi == 0 and len(phases) > 1:
            share = remaining * FIRST_PHASE_SHARE
        if (not deterministic and pi < len(phases) - 1
                and remaining - share - overhead < overhead + min_solve_s() / 2):
            # what would be left after this phase is too short for the next (it would
            # be skipped below): this phase takes it (a short LNS round at 256 nodes
            # and 0.3 s left 0.04 s unused, and its admission phase then had too
            # little time to find the optimum's admissions)
            share = remaining
        share = share if deterministic else max(least_phase_s(), share - overhead)
        solver = make_solver(share, deterministic, workers, seed, len(model.m.proto.variables),
                         presolve=ADMISSION_PRESOLVE or model.items[ks[0]][0] == "cost")
        solver.parameters.log_search_progress = log
        ts = time.perf_counter()
        st = solver.solve(model.m)
        used = share if deterministic else time.perf_counter() - ts + overhead
        remaining = max(0.0, remaining - used)
        statuses.append(_STATUS.get(st, str(st)))
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        d = _extract(model, solver)
        if d is None:
            statuses[-1] = "EXTRACT_FAILED"
            break
        best = d
        bounds.append(solver.best_objective_bound)
        realised = realised and len(d.placements) >= sum(solver.value(c.count)
                                                         for c in model.classes)
        val = int(solver.value(expr))  # exact integer (objective_value is a double)
        bound_info = (solver.objective_value, solver.best_objective_bound)
        if model.items[ks[0]][0] == "cost":
            # B >= W * (-cost) + (-count) with count <= n: cost >= -(B + n) / W
            n = len(model.evict) if len(ks) > 1 else 0
            lb = math.ceil((-solver.best_objective_bound - n) / weights[0] - 1e-9)
            cost_bound = max(0.0, lb / COST_SCALE)
        if st == cp_model.OPTIMAL:
            # each item at its optimal value: equivalent to expr == val, and much
            # tighter in the LP relaxation of the next phase than one weighted row
            for k in ks:
                _n, v, c, _lo, _hi = model.items[k]
                item = _wsum(v, c)
                model.m.add(item == int(solver.value(item)))
        else:
            model.m.add(expr >= val)
        # hint the next phase with this solution (bulk read of the response)
        sol = solver.response_proto.solution
        model.set_hints([(v, sol[v.index]) for v in model.decision_vars()])
    return PhaseResult(phases, statuses, best, bound_info, cost_bound, realised, bounds)
