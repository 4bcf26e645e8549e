"""The verifier's sift (``planner.checks.verify._Layout.sift``): the placements as
arrays name, per rule, the placed jobs that may break it, and the rule's loop looks
at those only. Over random changes to valid plans, the violations found that way
equal those found by looking at every placed job (``_Checker(sift=False)``), message
for message and in the same order."""

from __future__ import annotations

import copy
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from models import load_snapshot
from models.plan import Plan
from models.snapshot import Snapshot
from planner import plan as make_plan
from planner.checks.verify import _Checker, verify

ROOT = Path(__file__).resolve().parents[1]
# pools, down and drain nodes, two GPU types, islands, edges and no NVLink
# (gen-medium); NVLink pairs; gangs bound to one block; a reserved pool; storage
INSTANCES = ("gen-medium", "gen-small", "nvlink-pairs", "gang-same-block",
             "reserved-pool", "drain-down", "io-storm", "tier1-arrival")


def _planned(name: str) -> tuple[Snapshot, dict[str, Any]]:
    snap = load_snapshot(ROOT / "instances" / f"{name}.json")
    p = make_plan(snap, planner="greedy", deterministic=True)
    assert verify(snap, p) == []
    return snap, p.model_dump(mode="json")


def _mutate(rng: random.Random, snap: Snapshot, plan: dict[str, Any]) -> None:
    """One random change to ``plan`` (a plan's JSON form), in place."""
    nodes = [n.id for n in snap.nodes] + ["nowhere"]
    running = [j for j in snap.running() if j.placement]
    pending = [j.id for j in snap.pending()]
    places = plan["placements"]
    kind = rng.randrange(11)
    if places and kind < 7:
        p = rng.choice(places)
        part = rng.choice(p["placement"])
        if kind == 0:  # another node (unknown, down, drain, another pool or type)
            part["node"] = rng.choice(nodes)
        elif kind == 1:  # another GPU index, maybe out of range or on another's GPU
            free = [g for g in range(10) if g not in part["gpus"]]
            part["gpus"][rng.randrange(len(part["gpus"]))] = rng.choice(free)
        elif kind == 2:  # the part of another placement (a GPU given twice)
            other = rng.choice(places)
            part["node"], part["gpus"] = other["placement"][0]["node"], \
                list(other["placement"][0]["gpus"])
        elif kind == 3 and running:  # onto the GPUs of a running job
            victim = rng.choice(running).placement[0]
            part["node"], part["gpus"] = victim.node, list(victim.gpus)
        elif kind == 4:  # a part dropped or repeated (a node twice)
            if len(p["placement"]) > 1 and rng.random() < 0.5:
                p["placement"].remove(part)
            else:
                p["placement"].append(copy.deepcopy(part))
        elif kind == 5:  # start_after_s off, by a little or a lot
            p["start_after_s"] = max(0.0, p["start_after_s"]
                                     + rng.choice((1e-9, 1e-5, 0.5, 30.0, -30.0)))
        else:  # the placement given to another pending job
            p["job"] = rng.choice(pending)
    elif kind == 7 and plan["evictions"]:  # an eviction dropped
        plan["evictions"].pop(rng.randrange(len(plan["evictions"])))
    elif kind == 8 and running and plan["evictions"]:  # another running job evicted
        e = copy.deepcopy(rng.choice(plan["evictions"]))
        e["job"] = rng.choice(running).id
        plan["evictions"].append(e)
    elif kind == 9 and plan["evictions"]:  # another grace
        e = rng.choice(plan["evictions"])
        e["grace_s"] = e["grace_s"] + rng.choice((1.0, 120.0))
    elif plan["deferred"]:  # a deferred job placed on GPUs of a placed one
        d = plan["deferred"].pop(rng.randrange(len(plan["deferred"])))
        if places:
            plan["placements"].append({"job": d["job"], "start_after_s": 0.0, "placement":
                                       copy.deepcopy(rng.choice(places)["placement"])})


@pytest.mark.parametrize("name", INSTANCES)
def test_sifted_jobs_hold_every_violation(name: str) -> None:
    snap, base = _planned(name)
    rng = random.Random(name)
    rules: Counter[str] = Counter()
    for _case in range(60):
        raw = copy.deepcopy(base)
        for _ in range(rng.randint(1, 3)):
            _mutate(rng, snap, raw)
        try:
            p = Plan.model_validate(raw)
        except ValueError:  # (a change the plan's own fields refuse: GPUs twice in a part)
            continue
        sifted = _Checker(snap, p).run()
        assert sifted == _Checker(snap, p, sift=False).run()
        rules.update({v.rule for v in sifted})
    # the changes reach the rules the sift stands for, where the instance has them
    assert {"R1", "R2", "START"} <= set(rules) or not base["placements"]


def test_changes_reach_every_sifted_rule() -> None:
    """Across the instances, the random changes break each rule the sift serves (so
    the test above compares the sift where it matters)."""
    seen: set[str] = set()
    for name in ("gen-medium", "gang-same-block", "nvlink-pairs"):
        snap, base = _planned(name)
        rng = random.Random(7)
        for _case in range(80):
            raw = copy.deepcopy(base)
            _mutate(rng, snap, raw)
            try:
                p = Plan.model_validate(raw)
            except ValueError:
                continue
            seen |= {v.rule for v in verify(snap, p)}
    assert {"R1", "R2", "R3", "R4", "R7", "START", "PLAN"} <= seen
