"""planner.plan makes no cyclic garbage: it pauses Python's cyclic garbage collector
while it plans and afterwards moves what it made to the oldest generation instead
of collecting it (models.load.gc_paused, ``acyclic``), which is only right while a
plan leaves no reference cycles behind. The CP-SAT models are built without
OR-Tools' camel-case method aliases, each of which made its model a cycle
(planner/solver/cpmodel.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

import planner
from planner.sim.generate import generate
from planner.solver.cpmodel import CpModel

INSTANCES = sorted((Path(__file__).resolve().parent.parent / "instances").glob("*.json"))


@pytest.fixture
def collector_off() -> Iterator[None]:
    """The collector paused (a collection of its own would hide what planning
    leaves), and its setting restored."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def test_a_model_has_no_aliases_and_is_freed_without_the_collector(collector_off: None) -> None:
    m = CpModel()
    x = m.new_bool_var("x")
    m.add_bool_or([x])
    assert not hasattr(m, "AddBoolOr") and not hasattr(m, "NewBoolVar")
    ref = weakref.ref(m)
    del m, x
    assert ref() is None  # freed by its reference count alone


@pytest.mark.parametrize("name", planner.PLANNERS)
def test_planning_the_bundled_instances_leaves_no_unreachable_objects(
        name: str, collector_off: None) -> None:
    for path in INSTANCES:
        out = planner.plan(path, planner=name, time_limit_s=0.5, deterministic=True)
        assert out.status in ("optimal", "feasible", "fallback")
        del out
        assert gc.collect() == 0, f"{path.name}, {name}: reference cycles left"


def test_a_loop_a_bound_and_a_wall_clock_solve_leave_none(collector_off: None) -> None:
    doc = generate(nodes=24, pending=30, seed=3)
    moved = {**doc, "now": "2026-11-29T08:01:00Z"}
    loop = planner.Loop()
    for snap in (doc, moved, moved):
        loop.plan(snap, time_limit_s=0.5, deterministic=True)
    planner.plan(doc, time_limit_s=0.5, bound_s=1.0)
    assert gc.collect() == 0
    # afterwards the collector runs as it did
    planner.plan(doc, time_limit_s=0.5, deterministic=True)
    assert not gc.isenabled()  # (the caller's setting: this fixture's)
    gc.enable()
    planner.plan(doc, time_limit_s=0.5, deterministic=True)
    assert gc.isenabled() and gc.get_freeze_count() == 0
