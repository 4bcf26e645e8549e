"""The greedy search's shared tables (planner/heuristics/greedy.py).

- The bound table of a job shape (``_least_table``, made in numpy by
  ``_cover_table`` from the problem's victim columns) is, node by node, the
  fractional cover of ``cover_bounds`` over the victims the shape may evict,
  weighed as ``_weight`` weighs them (spare penalty, storm price, past penalty),
  to the last bit.
- ``evictions_closed``: where the budgets refuse any victim more, the search drops
  the nodes it would have to evict on without scoring them, and the
  Kubernetes-style baseline works out only options without victims; the plans are
  those made when the victims are refused one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from models import load_snapshot
from planner.core.decision import Decision
from planner.core.problem import build_problem
from planner.heuristics.greedy import GreedyPlanner, GreedyState, cover_bounds
from planner.sim.generate import generate


def test_cover_bounds_by_hand() -> None:
    # victims (weight, GPUs): 100 for 1 GPU (100 per GPU), 300 for 4 (75 per GPU):
    # the 4-GPU victim's GPUs come first, 75 each, then the other's 100
    got = cover_bounds([(100.0, 1), (300.0, 4)])
    want = [0.0, 75.0, 150.0, 225.0, 300.0, 400.0]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == w * (1 - 1e-9)  # (the sums are exact here)
        assert g <= w  # (a bound sorts before the option it bounds)


def _reference(g: GreedyPlanner, rights: frozenset[int], contested: frozenset[int],
               past: bool) -> np.ndarray:
    """The table node by node with cover_bounds, as the planner made it before."""
    p = g.p
    _free, most = p.node_arrays()
    tab = np.full((len(p.nodes), most + 1), np.inf)
    for ni, vids in g.by_node.items():
        ws = [(g._weight(v, contested, past), g.vmask[(v, ni)].bit_count())
              for v in vids if p.running[v].job.tier in rights]
        if ws:
            b = cover_bounds(ws)
            tab[ni, :len(b)] = b
    return tab


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cover_table_is_the_fractional_cover_per_node(seed: int) -> None:
    snap = load_snapshot(generate(nodes=96, seed=seed, occupancy=0.95, pending=30,
                                  multinode_share=0.2))
    p = build_problem(snap)
    storages = sorted({v.storage for v in p.running.values() if v.storage})
    assert storages
    settings = [{"spare_lower": True}, {"spare_lower": False},
                {"spare_lower": True, "storm_price": 1e3},
                {"spare_lower": True, "storm_price": 1e3, "priced": frozenset(storages[:1])}]
    shapes = [(frozenset({2, 3}), frozenset({3}), False), (frozenset({3}), frozenset(), True),
              (frozenset({2, 3}), frozenset(), False), (frozenset({1}), frozenset(), False)]
    checked = 0
    for kw in settings:
        g = GreedyPlanner(p, **kw)  # type: ignore[arg-type]
        g.past_penalty = 5e4  # (so that past weighs something)
        for rights, contested, past in shapes:
            want = _reference(g, rights, contested, past)
            got = g._cover_table(rights, contested, past)
            fin = np.isfinite(want)
            assert (np.isfinite(got) == fin).all()
            # the same sums in the same order: the same numbers to the last bit
            # (the heap compares them with _bound's, tests/test_cpsat_regressions.py)
            assert np.array_equal(got[fin], want[fin])
            checked += int(fin.sum())
    assert checked > 1000


def _snap(policy: dict) -> dict:
    data = generate(nodes=48, seed=3, occupancy=0.95, pending=40)
    data["policy"] = {**data.get("policy", {}), **policy}
    return data


def test_the_victim_tables_are_made_at_their_first_use() -> None:
    # A run on free GPUs alone (no job may evict: every rights set emptied) never
    # looks at the victims, and the problem's tables stay unmade; a run that may
    # evict makes them, and its planner holds the problem's own
    p = build_problem(load_snapshot(_snap({"thrash": None})))
    free_only = p.with_pending({j: replace(i, rights=frozenset())
                                for j, i in p.pending.items()})
    d = GreedyPlanner(free_only, spare_lower=True).solve()
    assert d.placements and not d.victims
    assert p._victims is None and free_only._victims is None
    g = GreedyPlanner(p, spare_lower=True)
    assert p._victims is None  # (not at the planner's making either)
    assert g.solve().victims
    by_node, vmask = p.victims_by_node()
    assert g.by_node is by_node and g.vmask is vmask
    with pytest.raises(AttributeError):
        _ = g.no_such_table  # type: ignore[attr-defined]


def test_evictions_closed_by_the_tick_budget() -> None:
    p = build_problem(load_snapshot(_snap({"max_evictions_per_tick": 0})))
    g = GreedyPlanner(p)
    st = g.state_of(GreedyPlanner(p).solve())
    assert g.evictions_closed(st)
    # every job takes free GPUs only: no victim, and the budget said no
    d = GreedyPlanner(p, spare_lower=True).solve()
    assert not d.victims and d.placements


def test_evictions_open_without_budgets() -> None:
    p = build_problem(load_snapshot(_snap({"max_evictions_per_tick": None,
                                           "max_evicted_gpu_fraction": None,
                                           "thrash": None})))
    g = GreedyPlanner(p)
    st = g.state_of(GreedyPlanner(p).solve())
    assert not g.evictions_closed(st)


def _both_ways(make: Callable[[], GreedyPlanner]
               ) -> tuple[Decision, Decision, list[bool], bool]:
    """A planner's plan as it is (and what evictions_closed said each time it was
    asked), and with evictions_closed always False (every option worked out); and
    whether both planners say a budget refused victims."""
    fast = make()
    said: list[bool] = []
    closed = fast.evictions_closed

    def watched(st: GreedyState) -> bool:
        said.append(closed(st))
        return said[-1]

    fast.evictions_closed = watched  # type: ignore[method-assign]
    d1 = fast.solve()
    slow = make()
    slow.evictions_closed = lambda st: False  # type: ignore[method-assign]
    d2 = slow.solve()
    return d1, d2, said, fast.budget_rejected and slow.budget_rejected


def test_closed_budget_plan_equals_scoring_every_node() -> None:
    """With a tick budget of 3 evictions the spare variant's tier-2 jobs meet a
    closed budget; the plan equals the one made scoring every such node (the
    search with evictions_closed switched off)."""
    p = build_problem(load_snapshot(_snap({"max_evictions_per_tick": 3})))
    d1, d2, said, rejected = _both_ways(lambda: GreedyPlanner(p, spare_lower=True))
    assert any(said)  # (the budget closed for some job's search)
    assert len(d1.victims) == 3
    assert d1.placements == d2.placements and d1.victims == d2.victims
    assert rejected  # (the portfolio reads it: the per-node baselines come first)


@pytest.mark.parametrize("name", ["k8s", "slurm"])
def test_closed_budget_baseline_plan_equals_working_out_every_option(name: str) -> None:
    """The per-node baselines, once the budgets are closed, look only at options
    without victims (which rank first anyway): the same plan as working out every
    node's victims."""
    from planner.heuristics.baselines import get_baseline

    p = build_problem(load_snapshot(_snap({"max_evictions_per_tick": 3})))
    d1, d2, said, _rejected = _both_ways(lambda: get_baseline(name)(p))
    assert len(d1.victims) <= 3 and d1.placements
    assert d1.placements == d2.placements and d1.victims == d2.victims
    if name == "k8s":
        assert any(said)  # (its search met a closed budget)
