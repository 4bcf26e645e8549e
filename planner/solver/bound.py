"""A proven bound on a plan's objective: a relaxation of the tick, solved with CP-SAT.

The relaxation keeps what decides how much a tick can admit and drops what makes
the whole model (planner/solver/model.py) big: GPU indices and NVLink islands
inside a node, and which job each shard belongs to. Per usable node it counts
the shards of each *kind* of pending job (tier, rights, shard size) the node
takes; the GPUs a node gives them are its free GPUs plus those of the victims
evicted on it (a Boolean per evictable running job), split as R7 allows (Hall's
condition over the rights sets present, as in the whole model). Jobs are admitted
per *class* (kind, GPUs per node, nodes, candidate list), the admitted shards of
the classes whose candidates lie inside a candidate list fitting on its nodes
(Hall's condition again, over each list alone and the whole cluster). R13 and
R15 (with ``exempt_if: all``: a victim whose GPUs a job of a tier that is not
exempt takes counts against the window) bound the victims as they do the plan.

Every valid plan is a solution of the relaxation (:func:`hint` maps it there), so
the relaxation's optimum bounds every plan's objective, lexicographically: the
plan's tier-1 GPUs against the most any solution admits; where they are equal,
its tier-2 GPUs against the most any solution with as many tier-1 GPUs admits;
and so on through the priority value, then the least eviction cost and the fewest
evictions for those admissions. :func:`prove` solves those phases in turn from the
plan, each proven by CP-SAT's bound (a phase stopped by its time limit still has
a valid bound, only a looser one), and stops at the first item where the bound
passes the plan: ``solver.gap`` is the relative gap there. Under R15's
``exempt_if: all`` each phase is solved in two cases without R15's switch
(:meth:`Relaxation.cases`), whose LP relaxation CP-SAT's search closes slowly.

:func:`prove_tiers` bounds the tier items alone at a small part of that cost, where
R15 has exempt tiers under ``exempt_if: all``: the two cases made cheap, with no
victim variable (``Relaxation(cheap=...)``), for the planner to prove within a tick
(docs/planner.md, section 2c); :func:`tighter` merges the two bounds.

Left out (the bound stays valid, only looser): NVLink islands, gang and block
structure beyond whole shards per node, R11/R12 (storm and grace), and R15 under
``exempt_if: any``. The cost item is the planned cost (with
``thrash.past_budget_gpu_s``), as the planners minimise it.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from ortools.sat.python import cp_model

from planner.core.budget import Budget
from planner.core.decision import Decision, preemptors_of
from planner.core.problem import NodeInfo, PendingInfo, Problem
from planner.solver.cpmodel import CpModel
from planner.solver.model import COST_SCALE, make_solver
from planner.solver.speed import scaled

# a phase whose time limit leaves less than this is not started (on any machine:
# CP-SAT's own overhead on a small model)
LEAST_PHASE_S = 0.01
# each phase leaves this share of the time left to each phase after it
LATER_SHARE = 0.1
# the relaxation's build, per usable node, on the benchmark machine (speed factor 1.0):
# RELAX_NODE_S, and RELAX_NODE_GROWTH_S more for each usable node of the cluster (its
# rows grow with the candidate lists' lengths too); measured at 1,024-4,096 nodes
# (docs/planner.md, section 2c: the bound on the other core)
RELAX_NODE_S = 2.4e-4
RELAX_NODE_GROWTH_S = 4.4e-8


def _usable(problem: Problem) -> int:
    """The usable nodes of ``problem`` (the build estimates count them)."""
    return sum(1 for n in problem.nodes if n.usable)


def relaxation_s(problem: Problem) -> float:
    """What building the relaxation of ``problem`` is expected to take on this machine."""
    usable = _usable(problem)
    return scaled(usable * (RELAX_NODE_S + RELAX_NODE_GROWTH_S * usable))


def _sum(vs: list, cs: list[int]) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.weighted_sum(vs, cs)


@dataclass
class BoundResult:
    """What :func:`prove` found: per item (name, the plan's value, the bound, its
    CP-SAT status), in objective order up to the first item the plan does not
    reach; ``gap`` is the relative gap at that item (0.0 when the plan reaches
    every bound: ``proven``; None when there is no such item to measure it at: no
    phase ran, or the time ran out on items the plan reaches), ``cost_bound`` the
    proven least eviction cost for the plan's admissions (GPU-s; None unless that
    phase ran)."""

    items: list[tuple[str, float, float, str]] = field(default_factory=list)
    gap: float | None = None
    cost_bound: float | None = None
    proven: bool = False  # the plan reaches the bound on every item (it is optimal)
    complete: bool = False  # every item has a bound (prove(through=True) past a gap too)
    seconds: float = 0.0

    def describe(self) -> str:
        """For solver.detail."""
        if not self.items:
            return "no bound (no time to solve the relaxation)"
        name, val, bnd, _st = self.items[-1]
        if self.proven:
            return (f"a relaxation solved with CP-SAT proves the plan optimal on "
                    f"{len(self.items)} objective item(s)")
        if self.gap is None:  # (every item so far reached)
            return ("bound from a relaxation solved with CP-SAT: the plan reaches the "
                    f"bound on {', '.join(n for n, *_ in self.items)}; nothing proven on "
                    "the items after")
        reached = ", ".join(n for n, *_ in self.items[:-1])
        head = f"reaches the bound on {reached}; " if reached else ""
        most = "least" if name in LEAST_ITEMS else "most"
        return (f"bound from a relaxation solved with CP-SAT: the plan {head}"
                f"{name} {_fmt(val)} against at {most} {_fmt(bnd)}")

    def judge(self, values: dict[str, float]) -> BoundResult:
        """The bound for another plan, whose values on the items are ``values``
        (:func:`item_values` on the same problem): the items in order up to the first
        the plan does not reach, the gap there. Each item's bound holds the items
        before it at the values of the plan :func:`prove` was given, which reached
        them: it bounds any plan with those values, so this plan's gap is measured at
        the first item where its value differs. A value past its bound (not expected)
        gives no bound at all. (From prove(through=True), the bounds past the first
        item the plan it was given does not reach hold the items before at their
        bounds: they bound any plan that reaches those.)"""
        out = BoundResult(seconds=self.seconds)
        for name, _mine, bnd, st in self.items:  # (up to a gap, or through=True)
            v = float(values.get(name, 0.0))
            up = name not in LEAST_ITEMS
            if (v > bnd + 1e-6) if up else (v < bnd - 1e-6):
                return BoundResult(seconds=self.seconds)
            out.items.append((name, v, bnd, st))
            if name == "eviction cost":
                out.cost_bound = max(0.0, bnd)
            if (v < bnd - 1e-6) if up else (v > bnd + 1e-6):
                out.gap = relative_gap(v, bnd, name)
                return out
        if self.complete:  # (every item bounded, the plan at every bound)
            out.gap, out.proven, out.complete = 0.0, True, True
        return out

    def said(self, took: str, *, traded: bool) -> str:
        """For solver.detail: :meth:`describe`, then ``took`` (where the time is said),
        and, for a plan that ``thrash.exempt_free_first`` ``traded`` and that the bound
        does not prove, TRADED_NOTE."""
        out = self.describe() + took
        return f"{out} {TRADED_NOTE}" if traded and not self.proven else out


# said of a bound measured after thrash.exempt_free_first traded admissions away
TRADED_NOTE = ("(the bound is the plain objective's: thrash.exempt_free_first traded "
               "admissions away)")
# the objective items a plan is least on (the others: most), by the names bounds use
LEAST_ITEMS = ("eviction cost", "evictions")


def item_rank(name: str) -> tuple[int, int] | None:
    """Where the objective item ``name`` ("tier-2 GPUs", "priority value", "eviction
    cost", "evictions") comes in the objective's order; None for another name."""
    if name.startswith("tier-") and name.endswith(" GPUs") and name[5:-5].lstrip("-").isdigit():
        return (0, int(name[5:-5]))
    rest = ("priority value", *LEAST_ITEMS)
    return (1 + rest.index(name), 0) if name in rest else None


def relative_gap(value: float, bound: float, name: str) -> float:
    """A plan's relative gap at objective item ``name``: ``(bound - value) / bound``
    for admissions and priority, ``(value - bound) / value`` for the cost and the
    evictions (each over at least 1)."""
    up = name not in LEAST_ITEMS
    return abs(bound - value) / max(1.0, abs(bound if up else value))


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x - round(x)) < 1e-9 else f"{x:,.1f}"


class Case:
    """One case of the relaxation (:meth:`Relaxation.cases`): R15's switch fixed
    (``within`` True or False; None: the relaxation as it is), with ``most``, the
    most GPUs all admitted jobs take together in it (None: not worked out). Its
    model, a copy of the relaxation's (hints too) with the switch fixed, is made
    when first asked for: a case left out before its first solve costs nothing."""

    def __init__(self, rel: Relaxation, within: bool | None, most: int | None):
        self.rel, self.within, self.most = rel, within, most
        self.made: CpModel | None = None  # its model, once made

    @property
    def model(self) -> CpModel:
        if self.made is None:
            rel = self.rel
            if self.within is None:
                self.made = rel.m
            else:
                assert rel.within is not None
                c = self.made = CpModel()
                c.proto.copy_from(rel.m.proto)
                c.add(rel.within == int(self.within))
                if self.within and self.most is not None:
                    shards = sorted(rel.s.items(), key=lambda kv: repr(kv[0]))
                    c.add(_sum([v for _key, v in shards], [key[1][2] for key, _v in shards])
                          <= self.most)
        return self.made


def _window_gpus(p: Problem, victims: Iterable[str]) -> int:
    """Under R15's window (``p.thrash``), the most GPUs ``victims`` free when every one
    counts against it: the ``left`` largest, at most ``gpus_left`` in all."""
    tb = p.thrash
    assert tb is not None
    gpus = sorted((p.running[v].job.total_gpus for v in victims), reverse=True)
    most = sum(gpus[:max(0, tb.left)])
    if tb.gpu_limit is not None:
        most = min(most, max(0, math.floor(tb.gpus_left)))
    return most


def _room(p: Problem, ni: int, tiers: frozenset[int],
          masks: dict[int, list[tuple[str, int]]]) -> int:
    """Node ``ni``'s free GPUs and those of the jobs ``masks`` holds there of a tier
    in ``tiers``, as a mask."""
    room = p.nodes[ni].free
    for vid, mk in masks.get(ni, ()):
        if p.running[vid].job.tier in tiers:
            room |= mk
    return room


def _unions(kinds: Iterable[tuple]) -> set[frozenset[int]]:
    """Every union of the rights of ``kinds`` (the empty one too)."""
    unions: set[frozenset[int]] = {frozenset()}
    for r in sorted({kind[1] for kind in kinds}, key=sorted):
        unions |= {u | r for u in unions}
    return unions


def _shards(nd: NodeInfo, room: int, k: int, nvlink: bool) -> int:
    """The whole ``k``-GPU shards node ``nd`` holds in the GPUs ``room`` (a mask),
    each inside one NVLink island where ``nvlink`` asks it (R3)."""
    hi = room.bit_count() // k
    if nvlink and k > 1 and not nd.composites:
        hi = min(hi, sum((room & isl).bit_count() // k for isl in nd.islands))
    return hi


def _classes(p: Problem) -> tuple[dict[tuple, list[PendingInfo]], dict[int, list[int]]]:
    """The pending jobs a plan may place, by class: (kind: (tier, rights, GPUs per
    node, NVLink need), nodes, the candidate list's id), each class's jobs most
    important first; and the candidate lists by id."""
    classes: dict[tuple, list[PendingInfo]] = defaultdict(list)
    lists: dict[int, list[int]] = {}
    for info in p.pending.values():
        if info.held_until is None and info.candidates:
            j = info.job
            kind = (j.tier, info.rights, j.gpus_per_node, info.need_nvlink)
            lists[id(info.candidates)] = info.candidates
            classes[(kind, j.nodes, id(info.candidates))].append(info)
    for jobs in classes.values():
        jobs.sort(key=lambda i: (-i.job.priority, i.job.id))
    return classes, lists


def item_values(p: Problem, d: Decision) -> dict[str, float]:
    """The plan ``d``'s value on each objective item as the relaxation counts it
    (:meth:`Relaxation.hint`, and BoundResult's items): GPUs per tier; the priority
    value of the most important ``n`` jobs of each class where ``d`` places ``n``
    of it; the planned eviction cost in GPU-s, each victim's rounded as the
    relaxation rounds it (with ``thrash.past_budget_gpu_s`` for each victim past
    what the window has left); the evictions."""
    out: dict[str, float] = defaultdict(float)
    prio = 0
    for (kind, nodes, _lid), jobs in _classes(p)[0].items():
        n = sum(1 for info in jobs if info.job.id in d.placements)
        out[f"tier-{kind[0]} GPUs"] += kind[2] * nodes * n
        prio += sum(cast(int, info.job.priority) * info.job.total_gpus for info in jobs[:n])
    out["priority value"] = prio
    victims = [v for v in d.victims if v in p.running and p.running[v].evictable]
    cost = sum(round(p.running[v].cost * COST_SCALE) for v in victims)
    tb = p.thrash
    if tb is not None and tb.past_gpu_s > 0:
        cost += round(tb.past_gpu_s * COST_SCALE) * max(0, len(victims) - max(0, tb.left))
    out["eviction cost"] = cost / COST_SCALE
    out["evictions"] = len(victims)
    return dict(out)


class Relaxation:
    """The relaxation's CP-SAT model (module docstring) and its objective items,
    each (name, variables, coefficients, sense: +1 maximised, -1 minimised)."""

    def __init__(self, problem: Problem, *, cheap: frozenset[int] | None = None,
                 victims: bool = False):
        self.p = p = problem
        self.m = m = CpModel()
        # R15's switch under exempt_if all (_budgets): some victim is not exempt
        self.within: cp_model.IntVar | None = None
        tb = p.thrash
        self.split = bool(tb is not None and tb.exempt_all and tb.exempt_tiers)
        # cheap (prove_tiers): the jobs of these tiers alone, and no victim variable:
        # their shards take free GPUs only, or with ``victims`` the GPUs of every
        # evictable job they may evict too; the tier items alone
        if cheap is not None:
            self.split = False
        # kinds: (tier, rights, shard size); classes: kind + (nodes, candidate list)
        self.classes, self.lists = _classes(p)
        if cheap is not None:
            self.classes = {key: jobs for key, jobs in self.classes.items()
                            if key[0][0] in cheap}
        # admitted jobs per class: ordered Booleans (highest priority first)
        self.admit: dict[tuple, list[cp_model.IntVar]] = {}
        # (in a canonical order: by kind, nodes and candidate nodes, not the lists' ids)
        for key, jobs in sorted(self.classes.items(), key=lambda kv: (
                repr(kv[0][0]), kv[0][1], self.lists[kv[0][2]])):
            if cheap is not None:  # (the tier items alone: how many, not which)
                self.admit[key] = [m.new_int_var(0, len(jobs), f"a{len(self.admit)}")]
                continue
            xs = [m.new_bool_var(f"a{len(self.admit)}_{i}") for i in range(len(jobs))]
            for a, b in itertools.pairwise(xs):
                m.add_implication(b, a)
            self.admit[key] = xs
        # victims: evicted (y), and under exempt_if all, evicted for a job of a tier
        # that is not exempt (z <= y)
        self.y: dict[str, cp_model.IntVar] = {}
        self.z: dict[str, cp_model.IntVar] = {}
        on_node: dict[int, list[tuple[str, int]]] = defaultdict(list)  # node -> (vid, gpus)
        for vid, v in sorted(p.running.items()):
            if not v.evictable or cheap is not None:
                continue
            parts = [(ni, mk.bit_count()) for ni, mk in v.parts if p.nodes[ni].usable]
            if not parts:
                continue
            self.y[vid] = m.new_bool_var(f"y[{vid}]")
            if self.split:
                self.z[vid] = m.new_bool_var(f"z[{vid}]")
                m.add_implication(self.z[vid], self.y[vid])
            for ni, g in parts:
                on_node[ni].append((vid, g))
        # shards per (node, kind)
        kinds = sorted({k[0] for k in self.classes}, key=repr)
        nodes_of: dict[tuple, set[int]] = defaultdict(set)
        for (kind, _n, lid) in self.classes:
            nodes_of[kind].update(self.lists[lid])
        self.s: dict[tuple[int, tuple], cp_model.IntVar] = {}
        self.hi: dict[tuple[int, tuple], int] = {}  # each s's upper bound
        masks: dict[int, list[tuple[str, int]]] = defaultdict(list)  # node -> (vid, mask)
        for vid in (self.y if cheap is None else  # (p.running is in the order of ids)
                    [v for v, r in p.running.items() if r.evictable] if victims else []):
            for ni, mk in p.running[vid].parts:
                masks[ni].append((vid, mk))
        # cheap: nodes alike for every row below share their variables (_group)
        self.count: dict[int, int] = {}  # a group's first node -> its nodes
        # node -> its group's first node (-1: in no candidate list)
        self.group = np.full(len(p.nodes), -1, dtype=np.intp)
        self.firsts: dict[int, list[int]] = {}  # candidate list id -> its groups
        if cheap is not None:
            self._group(kinds, nodes_of, masks)
        rooms: dict[tuple[int, frozenset[int]], int] = {}  # (kinds share their rights)
        for ki, kind in enumerate(kinds):
            _t, rights, k, nvlink = kind
            # (grouped: each group's first node stands for it)
            for ni in (sorted(nodes_of[kind]) if not self.count else
                       [n for n in sorted(self.count) if n in nodes_of[kind]]):
                nd = p.nodes[ni]
                room = rooms.get((ni, rights))
                if room is None:
                    room = rooms[(ni, rights)] = _room(p, ni, rights, masks)
                hi = _shards(nd, room, k, nvlink) * self.count.get(ni, 1)
                if hi > 0:
                    self.s[(ni, kind)] = m.new_int_var(0, hi, f"s{ni}_{ki}")
                    self.hi[(ni, kind)] = hi
        if cheap is not None:
            self._room_capacity(masks)
        else:
            self._capacity(kinds, on_node)
            self._shard_cuts(on_node)
        self._hall(kinds)
        if cheap is None:
            self._budgets()
        self.items: list[tuple[str, list, list[int], int]] = []
        self.past: cp_model.IntVar | None = None  # victims past R15's window (priced)
        self.past_left = 0
        self.most: dict[str, int] = {}  # each tier item's most (every job admitted)
        for t in sorted({k[0][0] for k in self.classes}):
            vs, cs = [], []
            most = 0
            for key, xs in self.admit.items():
                if key[0][0] == t:
                    gpus = key[0][2] * key[1]
                    vs += xs
                    cs += [gpus] * len(xs)
                    most += gpus * len(self.classes[key])
            self.items.append((f"tier-{t} GPUs", vs, cs, 1))
            self.most[f"tier-{t} GPUs"] = most
        if cheap is not None:
            return
        vs, cs = [], []
        for key, xs in self.admit.items():
            for info, a in zip(self.classes[key], xs, strict=True):
                w = cast(int, info.job.priority) * info.job.total_gpus
                if w:
                    vs.append(a)
                    cs.append(w)
        if vs:
            self.items.append(("priority value", vs, cs, 1))
        evs = sorted(self.y)
        if evs:
            cvs = [self.y[v] for v in evs]
            ccs = [round(p.running[v].cost * COST_SCALE) for v in evs]
            tb = p.thrash
            left = 0 if tb is None else max(0, tb.left)
            if tb is not None and tb.past_gpu_s > 0 and len(evs) > left:
                # thrash.past_budget_gpu_s: each victim past what the window has left
                past = self.past = m.new_int_var(0, len(evs) - left, "past")
                self.past_left = left
                m.add(past >= _sum(cvs, [1] * len(cvs)) - left)
                cvs, ccs = [*cvs, past], [*ccs, round(tb.past_gpu_s * COST_SCALE)]
            self.items.append(("eviction cost", cvs, ccs, -1))
            self.items.append(("evictions", [self.y[v] for v in evs], [1] * len(evs), -1))

    def _capacity(self, kinds: list[tuple], on_node: dict[int, list[tuple[str, int]]]) -> None:
        """R1 with R7 (and R15's split): on each node, for each set of kinds closed as
        Hall's condition asks, their GPUs at most the free GPUs and those of the
        victims some of them may use."""
        p, m = self.p, self.m
        tb = p.thrash
        exempt = {kind: bool(tb is not None and kind[0] in tb.exempt_tiers) for kind in kinds}
        unions = _unions(kinds)
        pairs = {(u, u) for u in unions}
        if self.split:  # (exempt kinds' rights U_ex within U_all)
            pairs |= {(ue, ua) for ua in unions for ue in unions if ue <= ua}
        for ni, shards in self._by_node():
            free = p.nodes[ni].free.bit_count()
            vs_here = on_node.get(ni, [])
            rows: set[tuple] = set()
            for ue, ua in pairs:
                member = tuple(sorted(
                    (i for i, (kind, _v) in enumerate(shards)
                     if kind[1] <= ua and (not self.split or not exempt[kind] or kind[1] <= ue)),
                ))
                if not member or (member, ue, ua) in rows:
                    continue
                rows.add((member, ue, ua))
                lhs = [shards[i][1] for i in member]
                lc = [shards[i][0][2] for i in member]
                sup, sc = [], []
                for vid, g in vs_here:
                    tier = p.running[vid].job.tier
                    if self.split:
                        # y - z to exempt kinds (tier in U_ex), z to any (tier in U_all)
                        if tier in ue:
                            sup.append(self.y[vid])
                            sc.append(g)
                            if tier not in ua:
                                sup.append(self.z[vid])
                                sc.append(-g)
                        elif tier in ua:
                            sup.append(self.z[vid])
                            sc.append(g)
                    elif tier in ua:
                        sup.append(self.y[vid])
                        sc.append(g)
                m.add(_sum(lhs, lc) - _sum(sup, sc) <= free)
            if not self.split:
                continue
            # GPUs that kinds not exempt take from victims come from z victims
            ne = [(kind, v) for kind, v in shards if not exempt[kind]]
            if ne:
                sup = [self.z[vid] for vid, _g in vs_here if vid in self.z]
                sc = [g for vid, g in vs_here if vid in self.z]
                m.add(_sum([v for _k, v in ne], [k[2] for k, _v in ne]) - _sum(sup, sc) <= free)

    def _group(self, kinds: list[tuple], nodes_of: dict[tuple, set[int]],
               masks: dict[int, list[tuple[str, int]]]) -> None:
        """Where no victim has a variable (``cheap``): the nodes alike in every row of
        the model, grouped (``group``, each group by its first node, ``count``
        nodes): in the same candidate lists, with as many whole shards of each kind
        (``_shards``) and as many GPUs for each union of rights (``_room``). A group's
        first node stands for all of them, with its shard bounds and rows times its
        count (``firsts``: the groups of each candidate list, which holds a group
        whole): every plan still maps to a solution (each group's shards summed), so
        the bound holds, and its LP is the per-node LP's (the nodes of a group are
        alike in every row). On the 8,192- and 12,500-node benchmark ticks some 50-70
        groups for some 8,000-12,000 nodes."""
        p = self.p
        # the lists (alike ones once) each node is in, as a row of bits; the kinds
        # whose classes use each list
        uniq: dict[tuple[int, ...], int] = {}
        li_of: dict[int, int] = {}  # list id -> its column
        uses: dict[int, set[tuple]] = defaultdict(set)  # column -> kinds
        for kind, _n, lid in self.classes:
            li = li_of.get(lid)
            if li is None:
                li = li_of[lid] = uniq.setdefault(tuple(self.lists[lid]), len(uniq))
            uses[li].add(kind)
        inside = np.zeros((len(p.nodes), max(1, len(uniq))), dtype=bool)
        for nodes, li in uniq.items():
            inside[np.fromiter(nodes, dtype=np.intp, count=len(nodes)), li] = True
        rows, member = np.unique(np.packbits(inside, axis=1), axis=0, return_inverse=True)
        member = member.reshape(-1)
        kinds_in = [frozenset().union(*(uses[int(li)] for li in np.flatnonzero(
            np.unpackbits(row)[:len(uniq)]))) for row in rows]  # kinds a row may host
        everyone = sorted(_unions(kinds), key=sorted)
        at = {kind: everyone.index(kind[1]) for kind in kinds}
        shapes: dict[tuple, tuple] = {}  # (list row, rooms, layout) -> its signature
        by_sig: dict[tuple, int] = {}
        group = self.group
        for ni in np.flatnonzero(inside.any(axis=1)).tolist():
            nd = p.nodes[ni]
            here = masks.get(ni)
            if here:  # (the GPUs of its jobs by tier, then each union's)
                of_tier: dict[int, int] = defaultdict(int)
                for vid, mk in here:
                    of_tier[p.running[vid].job.tier] |= mk
                rooms = tuple(functools.reduce(operator.or_, (mk for t, mk in of_tier.items()
                                                              if t in u), nd.free)
                              for u in everyone)
            else:
                rooms = (nd.free,) * len(everyone)
            row = int(member[ni])
            shape = (row, rooms, nd.islands, bool(nd.composites))
            sig = shapes.get(shape)
            if sig is None:
                hosts = kinds_in[row]
                sig = shapes[shape] = (row, tuple(
                    _shards(nd, rooms[at[kind]], kind[2], kind[3]) if kind in hosts else 0
                    for kind in kinds), tuple(r.bit_count() for r in rooms))
            first = by_sig.setdefault(sig, ni)
            group[ni] = first
            self.count[first] = self.count.get(first, 0) + 1
        for lid in li_of:
            members = self.lists[lid]
            self.firsts[lid] = np.unique(
                group[np.fromiter(members, dtype=np.intp, count=len(members))]).tolist()

    def _by_node(self) -> list[tuple[int, list[tuple[tuple, cp_model.IntVar]]]]:
        """The shard variables by node, (kind, variable) each, nodes in order."""
        by_node: dict[int, list[tuple[tuple, cp_model.IntVar]]] = defaultdict(list)
        for (ni, kind), var in self.s.items():
            by_node[ni].append((kind, var))
        return sorted(by_node.items())

    def _room_capacity(self, masks: dict[int, list[tuple[str, int]]]) -> None:
        """R1 with R7 where no victim has a variable (``cheap``): on each node, the
        GPUs of the kinds whose rights lie in a union of the rights present at most
        its free GPUs and those of the jobs ``masks`` holds there (every evictable
        job, or none) of a tier in that union (one kind alone is bounded so)."""
        for ni, shards in self._by_node():
            if len(shards) < 2:
                continue
            # (without victims every union has the same room: the widest is enough;
            # nodes grouped with others, where any has victims: every union, each row
            # holding for all of them)
            here = masks.get(ni) or (masks and self.count.get(ni, 1) > 1)
            rows = {frozenset().union(*(k[1] for k, _v in shards))}
            for r in {kind[1] for kind, _v in shards} if here else ():
                rows |= {u | r for u in rows} | {r}
            for u in sorted(rows, key=sorted):
                member = [(k, v) for k, v in shards if k[1] <= u]
                if len(member) < 2:
                    continue  # (one kind alone: its bound holds it)
                self.m.add(_sum([v for _k, v in member], [k[2] for k, _v in member])
                           <= _room(self.p, ni, u, masks).bit_count() * self.count.get(ni, 1))

    def _shard_cuts(self, on_node: dict[int, list[tuple[str, int]]]) -> None:
        """On each node, a kind's k-GPU shards at most floor(free / k) plus, per victim
        whose GPUs it may take, ceil(its GPUs there / k): implied by the capacity rows
        with whole shards (floor((f + G) / k) <= floor(f / k) + ceil(G / k)), and much
        stronger in the LP, which would otherwise spread fractions of shards over free
        GPUs that no whole shard fits."""
        p, m = self.p, self.m
        tb = p.thrash
        # the victims a kind may take on a node, by (node, rights, own): kinds share them
        takes: dict[tuple[int, frozenset[int], bool], list[tuple[cp_model.IntVar, int]]] = {}
        for (ni, kind), var in self.s.items():
            tier, rights, k, _nv = kind
            free = p.nodes[ni].free.bit_count() // k
            if free >= self.hi[(ni, kind)]:
                continue  # (the free GPUs alone hold as many as the node can)
            z = self.split and tb is not None and tier not in tb.exempt_tiers
            key = (ni, rights, z)
            vg = takes.get(key)
            if vg is None:
                own = self.z if z else self.y
                vg = takes[key] = [(own[vid], g) for vid, g in on_node.get(ni, ())
                                   if p.running[vid].job.tier in rights and vid in own]
            m.add(var - _sum([v for v, _g in vg], [-(-g // k) for _v, g in vg]) <= free)

    def _hall(self, kinds: list[tuple]) -> None:
        """The admitted shards of each kind on the nodes they may use: those of the
        classes whose candidates lie inside a list at most the kind's shards there
        (each list, and all nodes)."""
        m = self.m
        of_kind: dict[tuple, list[cp_model.IntVar]] = defaultdict(list)
        for (_ni, kd), v in self.s.items():
            of_kind[kd].append(v)
        for kind in kinds:
            mine = [(key, xs) for key, xs in self.admit.items() if key[0] == kind]
            total = _sum(of_kind[kind], [1] * len(of_kind[kind]))
            m.add(_sum([x for _key, xs in mine for x in xs],
                       [key[1] for key, xs in mine for _x in xs]) <= total)
            # (grouped: each list by its groups' first nodes, a group lying in a list
            # whole, so that one list lies in another as their groups do)
            sets = {lid: frozenset(self.firsts[lid] if self.firsts else self.lists[lid])
                    for (_kd, _n, lid), _xs in mine}
            for nodes in sets.values():
                inside = [(key, xs) for key, xs in mine if sets[key[2]] <= nodes]
                have = [self.s[(ni, kind)] for ni in sorted(nodes) if (ni, kind) in self.s]
                m.add(_sum([x for _key, xs in inside for x in xs],
                           [key[1] for key, xs in inside for _x in xs])
                      <= _sum(have, [1] * len(have)))

    def _budgets(self) -> None:
        """R13, and R15 (under ``exempt_if: all``; else left out)."""
        p, m = self.p, self.m
        pol = p.policy
        ys = [self.y[v] for v in sorted(self.y)]
        gs = [p.running[v].job.total_gpus for v in sorted(self.y)]
        if pol.max_evictions_per_tick is not None:
            m.add(_sum(ys, [1] * len(ys)) <= pol.max_evictions_per_tick)
        if pol.max_evicted_gpu_fraction is not None:
            limit = math.floor(pol.max_evicted_gpu_fraction * p.total_gpus_up_drain + 1e-9)
            m.add(_sum(ys, gs) <= limit)
        tb = p.thrash
        if not self.split or tb is None:
            return
        # a victim not exempt (z) binds every victim to the window's budget
        within = self.within = m.new_bool_var("within")
        for z in self.z.values():
            m.add_implication(z, within)
        # the victims not exempt are within the window's budget either way (strong rows
        # for the LP, which relaxes the switch below)
        zs = [self.z[v] for v in sorted(self.z)]
        m.add(_sum(zs, [1] * len(zs)) <= max(0, tb.left))
        if tb.gpu_limit is not None:
            m.add(_sum(zs, [p.running[v].job.total_gpus for v in sorted(self.z)])
                  <= max(0, math.floor(tb.gpus_left)))
        m.add(_sum(ys, [1] * len(ys)) <= max(0, tb.left)).only_enforce_if(within)
        if tb.gpu_limit is not None:
            m.add(_sum(ys, gs) <= max(0, math.floor(tb.gpus_left))).only_enforce_if(within)

    def cases(self) -> list[Case]:
        """The cases whose solutions together are the relaxation's (:class:`Case`):
        the model itself, or under R15's switch (``within``, _budgets) one case with
        the window's budget binding every victim and one with no victim for a tier
        that is not exempt, each without a switch for the LP to relax halfway. In the
        first the shards take free GPUs and those of at most ``left`` victims with
        at most ``gpus_left`` GPUs in all: that many GPUs (``most``), a row summing
        the nodes' capacity rows which CP-SAT's search would take long to find."""
        if self.within is None:
            return [Case(self, None, None)]
        p = self.p
        total = _window_gpus(p, self.y) + sum(
            p.nodes[ni].free.bit_count() for ni in {ni for ni, _k in self.s})
        return [Case(self, True, total), Case(self, False, None)]

    def hint(self, d: Decision) -> list[tuple[cp_model.IntVar, int]]:
        """The plan ``d`` as a solution of the relaxation (not a grouped one's)."""
        assert not self.count, "a relaxation with its nodes grouped has no per-node hint"
        p = self.p
        out: list[tuple[cp_model.IntVar, int]] = []
        for key, xs in self.admit.items():
            n = sum(1 for info in self.classes[key] if info.job.id in d.placements)
            out += [(x, int(i < n)) for i, x in enumerate(xs)]
        pre = preemptors_of(p, d)
        tb = p.thrash
        for vid, y in self.y.items():
            out.append((y, int(vid in d.victims)))
            if vid in self.z:
                nonexempt = any(p.pending[j].job.tier not in (tb.exempt_tiers if tb else ())
                                for j in pre.get(vid, ()))
                out.append((self.z[vid], int(vid in d.victims and nonexempt)))
        count: dict[tuple[int, tuple], int] = defaultdict(int)
        for j, parts in d.placements.items():
            info = p.pending[j]
            kind = (info.job.tier, info.rights, info.job.gpus_per_node, info.need_nvlink)
            for ni, _mk in parts:
                count[(ni, kind)] += 1
        out += [(v, count.get(key, 0)) for key, v in self.s.items()]
        if self.past is not None:
            out.append((self.past, max(0, len(d.victims) - self.past_left)))
        return out


def prove(problem: Problem, d: Decision, budget: Budget, *, deterministic: bool = False,
          workers: int = 1, seed: int = 0, through: bool = False) -> BoundResult:
    """Bound ``d``'s objective (module docstring) within ``budget``: the phases in
    objective order, each in an equal share of the time left, stopping at the
    first item ``d`` does not reach (or when the time is out). With ``through``
    (``d`` only a hint: the bound is for the plans BoundResult.judge measures), the
    phases go on past such an item, holding it at its bound rather than at ``d``'s
    value (``gap`` stays ``d``'s first).

    Under R15 with ``exempt_if: all`` each phase is solved in both of
    :meth:`Relaxation.cases`: an item's bound is the better of theirs, and a case
    whose bound falls short of the plan's value there is left out of later phases
    (none of its solutions ranks with the plan). In a case with a most GPUs, a
    tier's GPUs are at most that less the plan's GPUs of the tiers before it (the
    later phases hold those at the plan's values): a bound without a solve, which
    leaves the case out when it falls short of the plan."""
    t0 = time.perf_counter()
    res = BoundResult()
    if budget.left() < 2 * LEAST_PHASE_S and not deterministic:
        return res
    rel = Relaxation(problem)
    if not rel.items:
        return res
    hint = rel.hint(d)
    # (as add_hint does, in bulk: every variable is a positive one)
    rel.m.proto.solution_hint.vars.extend([var.index for var, _val in hint])
    rel.m.proto.solution_hint.values.extend([val for _var, val in hint])
    given = {var.index: val for var, val in hint}
    cases = rel.cases()
    before = 0  # the plan's GPUs in the tiers of the phases so far
    for pi, (name, vs, cs, sense) in enumerate(rel.items):
        # the phase takes what is left but LATER_SHARE of it for each phase after it
        # (a phase stops the run unless the plan reaches its bound, which the first
        # phases most often decide)
        share = budget.left() * (1.0 - LATER_SHARE) ** (len(rel.items) - 1 - pi) if (
            pi < len(rel.items) - 1) else budget.left()
        expr = _sum(vs, cs)
        # the plan's value as the relaxation counts it (costs rounded as there)
        plan_v = sum(c * given[v.index] for v, c in zip(vs, cs, strict=True))
        tiers = name.startswith("tier-")
        todo: list[tuple[Case, int | None]] = []  # each case left, with its ceiling
        for case in cases:
            ceiling = case.most - before if case.most is not None and tiers else None
            if ceiling is not None and ceiling < plan_v:
                continue  # (short of the plan: no solution here ranks with it)
            todo.append((case, ceiling))
        found: list[tuple[Case, int, str]] = []  # each case with its bound and status
        if plan_v == (sum(cs) if sense > 0 else 0):
            # every job of the item admitted, or no cost: reached without a solve
            found = [(case, plan_v, "ALL" if sense > 0 else "NONE") for case, _c in todo]
            todo = []
        elif not deterministic and share < LEAST_PHASE_S:
            break
        end = budget.elapsed() + share
        # the cases without a ceiling first: a ceiling at most the bound found already
        # cannot raise it, and stands for the case's bound without a solve
        todo.sort(key=lambda cc: cc[1] is not None)
        for ci, (case, ceiling) in enumerate(todo):
            if ceiling is not None and found and ceiling <= max(b for _c, b, _st in found):
                found.append((case, ceiling, "CEILING"))
                continue
            m = case.model
            if sense > 0:
                m.maximize(expr)
            else:
                m.minimize(expr)
            # the cases share the phase's time: each what is left over the cases left
            limit = (share if deterministic
                     else max(0.0, end - budget.elapsed()) / (len(todo) - ci))
            solver = make_solver(limit, deterministic, workers, seed, len(m.proto.variables))
            st = solver.solve(m)
            if st == cp_model.INFEASIBLE:
                continue  # (no solution in this case matches the plan on earlier items)
            if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                bnd = solver.best_objective_bound
                b = math.floor(bnd + 1e-6) if sense > 0 else math.ceil(bnd - 1e-6)
                if ceiling is not None:
                    b = min(b, ceiling)
                found.append((case, b, solver.status_name(st)))
            elif ceiling is not None:
                found.append((case, ceiling, "CEILING"))
            else:  # (stopped before it knew anything: no bound for the item)
                found = []
                break
        if not found:
            break
        bound = (max if sense > 0 else min)(b for _case, b, _st in found)
        scale = COST_SCALE if name == "eviction cost" else 1
        statuses = sorted({st for *_x, st in found})
        res.items.append((name, plan_v / scale, bound / scale, "/".join(statuses)))
        if name == "eviction cost":
            res.cost_bound = max(0.0, bound / COST_SCALE)
        reached = plan_v >= bound if sense > 0 else plan_v <= bound
        hold = plan_v
        if not reached:
            if res.gap is None:
                res.gap = relative_gap(plan_v, bound, name)
            if not through:
                break
            hold = bound
        # later phases: this item at the plan's value (no solution does better; with
        # through, at the bound: no solution does better either), in the cases that may
        # reach it (a case's model made later copies the rows so far)
        cases = [case for case, b, _st in found if (b >= hold if sense > 0 else b <= hold)]
        held = expr >= hold if sense > 0 else expr <= hold
        rel.m.add(held)  # (a case's model made later copies it)
        for case in cases:
            if case.made is not None and case.made is not rel.m:
                case.made.add(held)
        if tiers:
            before += hold
    else:
        res.complete = bool(res.items)
        if res.gap is None:
            res.gap, res.proven = 0.0, res.complete
    res.seconds = time.perf_counter() - t0
    return res


# prove_tiers()'s build of a cheap relaxation (nodes grouped: Relaxation._group) on the
# benchmark machine (speed factor 1.0): TIERS_BUILD_S, and TIERS_NODE_S per usable
# node (measured 7.4-12e-6 s per usable node at 1,024-12,500 nodes, 0.007-0.06 s at a
# factor of 0.6-0.7; an exempt tier's own model: EXEMPT_BUILD_TIMES); each tier's
# solve is stopped after as long as the build took, TIERS_LEAST_SOLVE_S at least:
# CP-SAT's bound settles with its first LP (its grouped model some 100-130 rows on
# the benchmark ticks), its proof takes longer (docs/planner.md, 2c)
TIERS_BUILD_S = 0.003
TIERS_NODE_S = 1.0e-5
TIERS_LEAST_SOLVE_S = 0.03
# an exempt tier's own model, which counts every victim's GPUs, takes up to this many
# times as long to build (measured 2.1-2.4 times at 1,024-12,500 nodes)
EXEMPT_BUILD_TIMES = 2.5


def tiers_build_s(problem: Problem) -> float:
    """What building one of :func:`prove_tiers`' relaxations is expected to take on
    this machine."""
    return scaled(TIERS_BUILD_S + TIERS_NODE_S * _usable(problem))


def tiers_s(problem: Problem) -> float:
    """What :func:`prove_tiers` is expected to take on this machine: a build and one
    tier's solve."""
    build = tiers_build_s(problem)
    return build + max(build, scaled(TIERS_LEAST_SOLVE_S))


def tiers_apply(problem: Problem) -> bool:
    """Does :func:`prove_tiers` apply: R15 with exempt tiers under ``exempt_if: all``?"""
    tb = problem.thrash
    return bool(tb is not None and tb.exempt_all and tb.exempt_tiers)


def prove_tiers(problem: Problem, d: Decision, budget: Budget, *,
                deterministic: bool = False, workers: int = 1, seed: int = 0,
                through: bool = False) -> BoundResult:
    """A bound on the tier items alone (admitted GPUs per tier), in a small part of
    :func:`prove`'s time, where R15 has exempt tiers under ``exempt_if: all``
    (:func:`tiers_apply`; else no items). Its two cases are :meth:`Relaxation.cases`'
    made cheap: where the window's budget binds every victim, the admitted GPUs are
    at most the case's most GPUs (the free GPUs of every node a job may use and the
    GPUs of the victims the window lets go), a bound without a solve; where no victim
    is for a job of a tier that is not exempt, those jobs take free GPUs alone, and
    the exempt tiers' jobs, left out, take none from them: a relaxation with no victim
    variable (``Relaxation(cheap=...)``), solved by CP-SAT per tier; an exempt tier's
    jobs there take free GPUs and those of every job they may evict, the other tiers
    left out (a model of their own). Each solve is stopped after as long as its build
    took (TIERS_LEAST_SOLVE_S at least: the bound settles with the first LP, long
    before the proof; :func:`_most`). As :func:`prove`, it stops at the first item
    ``d`` does not reach; the result is never ``complete``: nothing is proven on the
    priority value and the cost. With ``through``, it goes on past that item, which
    (and each after it) is then held at its bound, as :func:`prove`'s ``through``:
    the later bounds hold for any plan that reaches the bounds before them, whatever
    ``d``'s values there (BoundResult.judge measures another plan against them)."""
    t0 = time.perf_counter()
    res = BoundResult()
    if not tiers_apply(problem):
        return res
    p, tb = problem, problem.thrash
    assert tb is not None
    classes, lists = _classes(p)
    demand: dict[int, int] = defaultdict(int)
    for (kind, nodes, _lid), jobs in classes.items():
        demand[kind[0]] += kind[2] * nodes * len(jobs)
    values = item_values(p, d)
    most = _window_gpus(p, (v for v, r in p.running.items() if r.evictable))
    most += sum(p.nodes[ni].free.bit_count()
                for ni in set().union(*lists.values()) if p.nodes[ni].usable)
    rel: Relaxation | None = None  # the free case's, for the tiers that are not exempt
    rel_s = 0.0  # its build's time
    build_s = tiers_build_s(p)  # (expected)
    within, free = True, True  # the cases still alive (their bounds reach the items so far)
    before = 0  # the GPUs of the tiers so far, held
    held: dict[str, int] = {}
    tiers = sorted(demand)
    past = False  # (through: past the first item d does not reach; d's values left)
    for ti, t in enumerate(tiers):
        name = f"tier-{t} GPUs"
        v = int(values.get(name, 0))
        free_b: int | None = None  # the free case's bound (None: not solved)
        # a bound of every plan on the item from elsewhere (the packing of the first
        # tier's gangs, planner/solver/packing.py), or None
        packed = p.packed_bound.get(name)
        known = None if packed is None else math.floor(packed + 1e-6)
        if v == demand[t] and not past:
            bound, status = v, "ALL"
        elif known is not None and v >= known and not past:  # (reached: no case to solve)
            bound, status = known, "PACKED"
        else:
            found: list[tuple[int, str]] = []
            if within and (past or most - before >= v):  # (else short of d: left out)
                found.append((min(demand[t], most - before), "CEILING"))
            # the free case, where it is alive: solved, or (no time, no bound in time)
            # unknown, when only a bound from elsewhere (known) holds; not solved where
            # the window's case alone reaches that bound (the bound is then known
            # whatever the free case's: on the 12,500-node benchmark tick the exempt
            # tier's model, 0.3-0.5 s with its solve, for tier 1's packed 6,639)
            unknown = False
            by_known = free and known is not None and bool(found) and found[0][0] >= known
            solve = free and not by_known
            if solve:
                share = budget.left() * (1.0 - LATER_SHARE) ** (len(tiers) - 1 - ti)
                exempt = t in tb.exempt_tiers
                unknown = not deterministic and (share < LEAST_PHASE_S or not budget.fits(
                    EXEMPT_BUILD_TIMES * build_s if exempt else build_s if rel is None
                    else 0.0))
            if solve and not unknown:
                tb0 = time.perf_counter()
                if exempt:  # (its own model: its jobs alone, on free GPUs and victims')
                    model = Relaxation(p, cheap=frozenset({t}), victims=True)
                    most_s = time.perf_counter() - tb0
                else:
                    if rel is None:
                        rel = Relaxation(p, cheap=frozenset(tiers) - tb.exempt_tiers)
                        rel_s = time.perf_counter() - tb0
                        for n, vs, cs, _sense in rel.items:  # (the tiers before, held)
                            if n in held:
                                rel.m.add(_sum(vs, cs) >= held[n])
                    model, most_s = rel, rel_s
                most_s = max(most_s, scaled(TIERS_LEAST_SOLVE_S))
                # (what the build left of the share: a build slower than expected
                # leaves the solve less, never the run past its budget)
                share = budget.left() * (1.0 - LATER_SHARE) ** (len(tiers) - 1 - ti)
                expr = _tier_expr(model, name)
                if not deterministic and share < LEAST_PHASE_S:
                    unknown = True
                elif expr is None:
                    free_b = 0
                    found.append((0, "NONE"))
                else:
                    got, st_name = _most(model, expr[0], budget.left() if deterministic
                                         else min(share, most_s), deterministic, workers, seed)
                    if got is not None:
                        free_b = min(expr[1], math.floor(got + 1e-6))
                        found.append((free_b, st_name))
                    elif st_name != "INFEASIBLE":  # (stopped before any bound: unknown,
                        unknown = True  # not a case without plans)
            # (unknown: the ceiling alone bounds nothing, the free case may be above)
            if known is not None and (unknown or not found or by_known
                                      or known < max(b for b, _st in found)):
                found = [(known, "PACKED")]
            elif unknown:
                break
            if not found:
                break
            bound = max(b for b, _st in found)
            status = "/".join(sorted({st for _b, st in found}))
        if v > bound and not past:  # (not expected: no bound at all)
            return BoundResult(seconds=time.perf_counter() - t0)
        res.items.append((name, float(v), float(bound), status))
        hold = held[name] = bound if past else v
        if v < bound and not past:
            res.gap = relative_gap(v, bound, name)
            if not through:
                break
            past, hold = True, bound
            held[name] = hold
        within = within and most - before >= hold
        free = free and (free_b is None or free_b >= hold)
        before += hold
        if rel is not None:
            expr = _tier_expr(rel, name)
            if expr is not None:
                rel.m.add(expr[0] >= hold)
    res.seconds = time.perf_counter() - t0
    return res


def _most(model: Relaxation, expr: cp_model.LinearExpr, limit: float, deterministic: bool,
          workers: int, seed: int) -> tuple[float | None, str]:
    """The most ``expr`` takes in ``model``, as CP-SAT bounds it within ``limit``, and
    the status: stopped before a solution, the last bound its search reported (the
    solver's own is not one then, docs/planner.md section 3b); None if none, or if
    the model has no solution (no plan of the case to bound)."""
    model.m.maximize(expr)
    solver = make_solver(limit, deterministic, workers, seed, len(model.m.proto.variables))
    seen: list[float] = []
    solver.best_bound_callback = seen.append
    st = solver.solve(model.m)
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return solver.best_objective_bound, solver.status_name(st)
    if st == cp_model.UNKNOWN and seen:
        return min(seen), solver.status_name(st)
    return None, solver.status_name(st)


def _tier_expr(rel: Relaxation, name: str) -> tuple[cp_model.LinearExpr, int] | None:
    """The relaxation's item ``name`` as an expression, with its most (every job
    admitted); None where it has no such item."""
    for n, vs, cs, _sense in rel.items:
        if n == name:
            return _sum(vs, cs), rel.most[n]
    return None


def tighter(full: BoundResult, tiers: BoundResult) -> BoundResult:
    """The bounds of ``prove(through=True)`` (``full``) with those of :func:`prove_tiers`
    for the same plan (``tiers``) where they are lower, item by item: up to the first
    item where ``full``'s plan falls short (prove_tiers stops there, and ``full``
    holds that item at its own bound after it), the lower bound of each; where the
    lower is ``tiers``', the items after are dropped (``full`` bounded them holding
    that item at its looser bound); where ``full`` stopped before ``tiers``, the
    items ``tiers`` bounded after it. Its gap is at the first item the plan falls
    short of, and it is complete and proven as ``full`` is, where no item was
    dropped. Its time is both runs'."""
    out = BoundResult(seconds=full.seconds + tiers.seconds)
    cut = False
    for i, item in enumerate(full.items):
        other = tiers.items[i] if i < len(tiers.items) else None
        if other is not None and other[:2] == item[:2] and other[2] < item[2]:
            out.items.append(other)
            cut = True
            break
        out.items.append(item)
    else:
        out.items += tiers.items[len(full.items):]
        cut = len(tiers.items) > len(full.items)
    for name, v, b, _st in out.items:
        if name == "eviction cost":
            out.cost_bound = max(0.0, b)
        if out.gap is None and ((v < b - 1e-6) if name not in LEAST_ITEMS else (v > b + 1e-6)):
            out.gap = relative_gap(v, b, name)
    out.complete = full.complete and not cut
    out.proven = out.complete and out.gap is None
    if out.proven:
        out.gap = 0.0
    return out
